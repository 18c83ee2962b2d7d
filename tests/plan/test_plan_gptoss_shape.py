"""gpt-oss's shape as Megatron-Core runs it (docs/plan.md "Expert bias and clamped GLU (gpt-oss)",
"Sliding window on some layers"): alternating windowed / full-causal attention, the fc2 bias added
outside the grouped GEMM, the clamp before the fused activation; 64-wide heads; Qwen3's q/k RMSNorm
("Query-key norm"); checked against closed forms."""

import pytest

from wanka.hardware.catalog import gpu as catalog_gpu
from wanka.plan import efficiency as E
from wanka.plan.compute import layer_time
from wanka.plan.expert_epilogue import expert_epilogue
from wanka.plan.published import load_rows, row_model
from wanka.workload.flops import windowed_layer_share


def _gptoss():
    rows = [r for r in load_rows("nemo_perf") if r["model_name"] == "gpt-oss-120b"]
    assert len(rows) == 18
    return rows[0], row_model(rows[0])


def test_rows_state_the_megatron_core_shape():
    _, m = _gptoss()
    assert (m.layers, m.hidden, m.heads, m.kv_heads_, m.head_dim_) == (36, 2880, 64, 8, 64)
    assert (m.moe.experts, m.moe.top_k, m.moe.ffn_hidden, m.vocab) == (128, 4, 2880, 201088)
    assert (m.sliding_window, m.full_attention_every) == (128, 2)
    assert m.moe.expert_bias and m.moe.activation_clamp == 7.0


def test_windowed_layer_share_follows_megatron_layer_numbering():
    _, m = _gptoss()
    assert windowed_layer_share(m) == 0.5  # layers 1, 3, ..., 35 windowed; 2, 4, ..., 36 full
    odd = m.model_copy(update={"layers": 5, "full_attention_every": 3})  # 1 2 [3] 4 5
    assert windowed_layer_share(odd) == pytest.approx(4 / 5)
    assert windowed_layer_share(m.model_copy(update={"full_attention_every": None})) == 1.0
    assert windowed_layer_share(m.model_copy(update={"sliding_window": None})) == 0.0


def test_alternating_attention_is_the_mean_of_both_layer_kinds():
    _, m = _gptoss()
    g = catalog_gpu("b200")
    args = (g, True, 4, 4096, 4096, 1, 8, False, "none", "bf16", "flash")
    mixed = layer_time(m, *args).attn_fwd_s
    every = layer_time(m.model_copy(update={"full_attention_every": None}), *args).attn_fwd_s
    full = layer_time(m.model_copy(update={"sliding_window": None, "full_attention_every": None}), *args).attn_fwd_s
    assert every < mixed < full
    assert mixed == pytest.approx((every + full) / 2)


def test_expert_bias_and_clamp_cost_their_bytes_and_kernels():
    _, m = _gptoss()
    g = catalog_gpu("b200")
    ep, mbs, s = 8, 4, 4096
    plain = m.model_copy(update={"moe": m.moe.model_copy(update={"expert_bias": False, "activation_clamp": None})})
    args = (g, True, mbs, s, s, 1, ep, False, "none", "bf16", "flash")
    with_, without = layer_time(m, *args), layer_time(plain, *args)
    local = m.moe.experts / ep
    rows = mbs * s * m.moe.top_k
    h, f = m.hidden, m.moe.ffn_hidden
    fwd_bytes = 28 * h + 16 * f  # fc2 bias (fp32 b*p, add, cat, cast) + two clamps and a cat
    bwd_bytes = 36 * h + 20 * f
    fwd_kernels = 2 * local + 2 + 3
    bwd_kernels = 5 * local + 1 + 3
    assert expert_epilogue(m, local) == (fwd_bytes, bwd_bytes, fwd_kernels, bwd_kernels)
    hbm = E.hbm_Bps(g)
    assert with_.fwd_s - without.fwd_s == pytest.approx(rows * fwd_bytes / hbm + E.KERNEL_OVERHEAD_S * fwd_kernels)
    assert with_.bwd_s - without.bwd_s == pytest.approx(rows * bwd_bytes / hbm + E.KERNEL_OVERHEAD_S * bwd_kernels)
    assert expert_epilogue(plain, local) == (0.0, 0.0, 0.0, 0.0)
    # moe_act recompute reruns the clamp with the activation (bias_act_func is checkpointed)
    rec = ("selective", "bf16", "flash", ("moe_act",))
    r_with = layer_time(m, g, True, mbs, s, s, 1, ep, False, *rec).recompute_s
    r_without = layer_time(plain, g, True, mbs, s, s, 1, ep, False, *rec).recompute_s
    assert r_with - r_without == pytest.approx(rows * 16 * f / hbm)


def test_narrow_heads_run_at_the_fa3_papers_ratio():
    assert E.attention_head_dim_factor(128) == E.attention_head_dim_factor(256) == 1.0
    assert E.attention_head_dim_factor(64) == pytest.approx(413 / 595)  # cuDNN, FA3 paper Fig. 5
    assert E.attention_head_dim_factor(64, "flash2") == pytest.approx(324 / 370)
    assert E.attention_head_dim_factor(96) == pytest.approx((413 / 595 + 1) / 2)
    _, m = _gptoss()
    g = catalog_gpu("h100-sxm")
    args = (g, True, 1, 4096, 4096, 1, 8, False, "none", "bf16", "flash")
    narrow = layer_time(m, *args).attn_fwd_s
    # the same FLOPs with 128-wide heads (half the heads) at the head-dim-128 rate
    wide = layer_time(m.model_copy(update={"heads": 32, "kv_heads": 4, "head_dim": 128}), *args).attn_fwd_s
    assert narrow == pytest.approx(wide * 595 / 413)


def test_qwen3_rows_pay_two_head_norms():
    rows = [r for r in load_rows("nemo_perf") if r["model_name"].startswith("Qwen3")]
    assert rows and all(row_model(r).qk_norm for r in rows)
    m = row_model(rows[0])
    plain = m.model_copy(update={"qk_norm": False})
    g = catalog_gpu("b200")
    mbs, s, tp = 1, 4096, 2
    args = (g, True, mbs, s, s, tp, 8, True, "none", "bf16", "flash")
    extra = layer_time(m, *args).fwd_s - layer_time(plain, *args).fwd_s
    elems = mbs * s * (m.heads + m.kv_heads_) * m.head_dim_ / tp  # heads split over TP
    assert extra == pytest.approx(elems * 4 / E.hbm_Bps(g) + 2 * E.KERNEL_OVERHEAD_S)


def test_fused_grouped_mlp_rows_skip_the_eager_epilogue():
    from wanka.plan.published import framework_options

    rows = [r for r in load_rows("nemo_perf") if r["model_name"] == "gpt-oss-120b"]
    fused = {r["id"] for r in rows if framework_options(r).moe_fused_expert_mlp}
    # the GB200 MXFP8 presets with cutedsl_fused_grouped_mlp / use_transformer_engine_op_fuser
    assert fused == {f"nemo_gpt-oss-120b_gb200_64gpu_mxfp8_{v}" for v in ("26.06", "26.06.01", "26.08")}
    m = row_model(rows[0])
    g = catalog_gpu("gb200")
    args = (g, True, 4, 4096, 4096, 1, 64, False, "selective", "fp8", "flash", ("moe_act",), None, 1.0, False,
            "fused", False, "alltoall", True)
    eager, fused_lt = layer_time(m, *args, False), layer_time(m, *args, True)
    plain = m.model_copy(update={"moe": m.moe.model_copy(update={"expert_bias": False, "activation_clamp": None})})
    base = layer_time(plain, *args, False)
    assert eager.fwd_s > fused_lt.fwd_s == pytest.approx(base.fwd_s)
    assert fused_lt.bwd_s == pytest.approx(base.bwd_s) and fused_lt.recompute_s == pytest.approx(base.recompute_s)
