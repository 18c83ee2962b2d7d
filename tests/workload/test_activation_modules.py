"""Finer selective recompute and FP8 activation caching drop exactly the items they name."""

import pytest

from wanka.workload import load_model
from wanka.workload.activations import layer_activations


def test_layernorm_recompute_drops_the_two_norm_outputs():
    m = load_model("llama3-8b")
    s, b = 4096, 1
    plain = layer_activations(m, b, s)
    ln = layer_activations(m, b, s, modules=("layernorm",))
    assert plain.replicated - ln.replicated == pytest.approx(2 * 2 * m.hidden * s * b)
    assert plain.tp_split == ln.tp_split


def test_mla_up_projection_recompute_drops_q_k_v_only_for_mla():
    ds, llama = load_model("deepseek-v3"), load_model("llama3-8b")
    s = 4096
    q = ds.heads * (ds.mla.qk_nope_head_dim + ds.mla.qk_rope_head_dim)
    v = ds.heads * ds.mla.v_head_dim
    drop = layer_activations(ds, 1, s).tp_split - layer_activations(ds, 1, s, modules=("mla_up_proj",)).tp_split
    assert drop == pytest.approx(2 * (2 * q + v) * s)
    assert layer_activations(llama, 1, s, modules=("mla_up_proj",)) == layer_activations(llama, 1, s)


def test_fp8_cache_and_moe_act_shrink_deepseek_moe_layer_by_its_listed_items():
    m = load_model("deepseek-v3")
    s, h, f, k = 4096, m.hidden, m.moe.ffn_hidden, m.moe.top_k
    plain = layer_activations(m, 1, s, moe_layer=True)
    act = layer_activations(m, 1, s, moe_layer=True, modules=("moe_act",))
    assert plain.tp_split - act.tp_split == pytest.approx(k * 2 * f * s)  # expert SwiGLU outputs (bf16)
    fp8 = layer_activations(m, 1, s, moe_layer=True, modules=("moe_act",), fp8=True)
    # norm outputs 2 x h, dispatched tokens k x h, SwiGLU inputs k x 2f, shared-expert output f: 1 byte less each
    assert act.replicated - fp8.replicated == pytest.approx(2 * h * s)
    assert act.tp_split - fp8.tp_split == pytest.approx((k * h + k * 2 * f + m.moe.shared_experts * f) * s)


def test_per_op_sac_keeps_only_torchtitans_save_list():
    """torchtitan's per-op SAC (`_save_list`, every second aten.mm recomputed): a Llama 3 8B block keeps its
    16-bit input and the outputs of wq, wv, w1, w2 and SDPA (plus the fp32 log-sum-exp), 63.6 KB a token
    against 139.4 KB of plain selective recompute; MoE layers and MLA keep the plain count."""
    m = load_model("llama3-8b")  # h 4096, 32 heads and 8 KV heads of 128, FFN 14336
    s = 8192
    sac = layer_activations(m, 1, s, modules=("alternate_matmuls",))
    h, q, kv, ffn = 4096, 32 * 128, 8 * 128, 14336
    assert sac.replicated == 2 * (2 * h) * s  # block input, w2 output
    assert sac.tp_split == (2 * q + 2 * kv + 2 * q + 4 * 32 + 2 * ffn) * s
    per_token = sac.stored(1, False, "selective") / s
    plain = layer_activations(m, 1, s).stored(1, False, "selective") / s
    assert per_token == 63_616 and plain == 139_392
    ds = load_model("deepseek-v3")
    assert layer_activations(ds, 1, s, modules=("alternate_matmuls",)) == layer_activations(ds, 1, s)
    mix = load_model("mixtral-8x7b")
    assert (layer_activations(mix, 1, s, moe_layer=True, modules=("alternate_matmuls",))
            == layer_activations(mix, 1, s, moe_layer=True))
