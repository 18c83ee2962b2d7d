"""torchtitan's per-step work outside the blocks' kernels: FSDP2's copies on the compute stream,
foreach AdamW, the eager fp32 loss (plan/zero3.py fsdp2_copy_bytes, estimate.py, compute.head_time)."""

import dataclasses

import pytest

from wanka.plan import efficiency as E
from wanka.plan.compute import head_time
from wanka.plan.estimate import ADAM_BYTES_PER_PARAM, ADAM_FOREACH_BYTES_PER_PARAM, estimate
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model
from wanka.plan.zero3 import fsdp2_copy_bytes

ROW = "torchtitan_llama3.1-8b_8gpu_fsdp_compile_bf16"  # FSDP2 over 8 GPUs, 2 x 8K tokens per GPU


def _priced(**off):
    row = next(r for r in load_rows("torchtitan") if r["id"] == ROW)
    model, cluster = row_model(row), row_cluster(row)
    lay = row_layout(row)[0].resolve(cluster.gpus, model)
    opts = dataclasses.replace(framework_options(row, lay), **off)
    return model, cluster, lay, opts, estimate(model, cluster, lay, options=opts)


def test_profile_switches_are_on_for_torchtitan_only():
    opts = _priced()[3]
    assert opts.fsdp2_copies and opts.adam_foreach and opts.eager_fp32_loss
    from wanka.plan.frameworks import framework

    for other in ("fsdp", "megatron-core", "deepspeed"):
        o = framework(other).options()
        assert not (o.fsdp2_copies or o.adam_foreach or o.eager_fp32_loss), other


def test_fsdp2_copy_bytes_closed_form():
    # blocks gathered twice (forward, backward) and copied out (read + write), the root once;
    # every gradient cast 16-bit -> reduce dtype once
    assert fsdp2_copy_bytes(100.0, 10.0, 2, 4) == (2 * 100 + 10) * 4 + 110 * 6
    assert fsdp2_copy_bytes(100.0, 0.0, 1, 2) == 200 * 2 + 100 * 4


def test_fsdp2_copies_add_their_hbm_time_to_the_step():
    model, cluster, lay, opts, on = _priced()
    off = _priced(fsdp2_copies=False)[4]
    from wanka.plan.memory import _stage_params
    from wanka.workload.params import attention_params, mlp_params, norm_params

    params = sum(_stage_params(model, lay, 0))  # FSDP over 8 GPUs, no TP/PP: the whole model
    blocks = model.layers * (attention_params(model) + mlp_params(model, model.ffn_hidden) + norm_params(model))
    expected = fsdp2_copy_bytes(blocks, params - blocks, 2, 4)
    got = (on.breakdown["dp_comm"] - off.breakdown["dp_comm"]) * E.hbm_Bps(cluster.gpu)
    assert got == pytest.approx(expected, rel=0.02)
    assert on.tokens_per_s_per_gpu < off.tokens_per_s_per_gpu


def test_foreach_adam_moves_80_bytes_per_parameter():
    on, off = _priced()[4], _priced(adam_foreach=False)[4]
    assert on.breakdown["optimizer"] / off.breakdown["optimizer"] == pytest.approx(
        ADAM_FOREACH_BYTES_PER_PARAM / ADAM_BYTES_PER_PARAM)


def test_eager_loss_counts_torchtitans_fp32_copy():
    model, cluster, lay, _, _ = _priced()
    fused = head_time(model, cluster.gpu, 2, 8192, 1, "bf16")
    eager = head_time(model, cluster.gpu, 2, 8192, 1, "bf16", True)
    logits = 2 * 8192 * model.vocab
    hbm = E.hbm_Bps(cluster.gpu)
    assert eager.fwd_s - fused.fwd_s == pytest.approx((14 - 12) * logits / hbm)
    assert eager.bwd_s - fused.bwd_s == pytest.approx((22 - 12) * logits / hbm)


def test_flash2_backward_runs_at_fa2s_lower_backward_rate():
    """FA3 paper Fig. 5/6 (H100, head dim 128, 16K): FA2 forward 0.339 of peak, backward 0.326."""
    from wanka.hardware import gpu
    from wanka.plan.compute import layer_time
    from wanka.workload import load_model

    m = load_model("llama3-8b")
    for name, kernel, ratio in (("h100-sxm", "flash2", 2.5 * 0.339 / 0.326), ("h100-sxm", "flash", 2.5),
                                ("a100-80gb", "flash2", 2.5)):
        lt = layer_time(m, gpu(name), False, 1, 8192, 8192, 1, 1, False, "none", "bf16", kernel)
        # backward = 2 x (GEMMs, elementwise, launches) + the attention backward (compute.layer_time)
        attn_bwd = lt.bwd_s - 2 * (lt.fwd_s - lt.attn_fwd_s)
        assert E.attention_backward_over_forward(gpu(name), kernel) == pytest.approx(ratio)
        assert attn_bwd / lt.attn_fwd_s == pytest.approx(ratio, rel=1e-9)


def test_compiled_complex_rope_costs_what_eager_rope_does():
    """torch.compile leaves torchtitan's complex RoPE to ATen: a compiled block pays the RoPE part of
    the eager traffic (16 B per q/k element), not the norms' or SwiGLU's."""
    from wanka.hardware import gpu
    from wanka.plan.compute import complex_rope_extra_bytes, layer_time
    from wanka.workload import load_model

    m, g = load_model("llama3-8b"), gpu("h100-sxm")
    args = (m, g, False, 1, 8192, 8192, 1, 1, False, "none", "bf16", "flash2", ("core_attn",), None, 1.0)
    fused = layer_time(*args, False, "fused", False)
    rope = layer_time(*args, False, "fused", True)
    eager = layer_time(*args, True, "fused", True)  # eager already counts it: no double count
    assert complex_rope_extra_bytes(m) == 16 * (32 + 8) * 128
    assert (rope.fwd_s - fused.fwd_s) * E.hbm_Bps(g) == pytest.approx(8192 * complex_rope_extra_bytes(m))
    assert eager.fwd_s == layer_time(*args, True, "fused", False).fwd_s
    assert _priced()[3].complex_rope
