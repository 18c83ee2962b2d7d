"""Recompute modules "mlp" (Megatron-Core --recompute-modules mlp; MaxText remat policies that keep
only the attention projections) and "out_proj" (MaxText's save_qkv_proj also recomputes the attention
output projection), and the MaxText rows that use them (dgxc maxtext/configure.sh)."""

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.plan.published import framework_options, load_rows, row_layout
from wanka.workload import load_model
from wanka.workload.flops import attention_gemms, mlp_gemms


@pytest.fixture(scope="module")
def priced():
    m, c = load_model("llama3-70b"), load_cluster("meta-24k-h100", gpus=64)
    lay = Layout.parse("tp=1,pp=1,mbs=1,gbs=64,zero=3,recompute=selective")
    out = {mods: estimate(m, c, lay, options=Options(recompute_modules=mods))
           for mods in (("core_attn",), ("core_attn", "mlp"), ("core_attn", "mlp", "out_proj"))}
    out["full"] = estimate(m, c, Layout.parse("tp=1,pp=1,mbs=1,gbs=64,zero=3,recompute=full"))
    return m, out


def test_mlp_recompute_costs_the_mlp_forward_and_saves_its_activations(priced):
    m, e = priced
    attn, mlp, full = e[("core_attn",)], e[("core_attn", "mlp")], e["full"]
    assert attn.breakdown["recompute"] < mlp.breakdown["recompute"] < full.breakdown["recompute"]
    assert mlp.memory["activations"] < attn.memory["activations"]
    # HFU: one more forward of every dense layer's MLP GEMMs, 2*k*n FLOPs per token each
    tokens = mlp.layout.gbs * mlp.seq_len
    extra = m.layers * sum(2.0 * g.k * g.n for g in mlp_gemms(m, m.ffn_hidden)) * tokens
    peak = mlp.cluster_ref.gpu.peak("bf16") * 1e12
    hw = lambda e: e.hfu * e.step_time_s * e.gpus * peak
    assert hw(mlp) - hw(attn) == pytest.approx(extra, rel=1e-9)


def test_out_proj_recompute_costs_the_attention_output_gemm_and_stays_below_full(priced):
    m, e = priced
    mlp, out, full = e[("core_attn", "mlp")], e[("core_attn", "mlp", "out_proj")], e["full"]
    assert mlp.breakdown["recompute"] < out.breakdown["recompute"] < full.breakdown["recompute"]
    tokens = out.layout.gbs * out.seq_len
    extra = m.layers * sum(2.0 * g.k * g.n for g in attention_gemms(m) if g.name == "attn_out") * tokens
    peak = out.cluster_ref.gpu.peak("bf16") * 1e12
    hw = lambda e: e.hfu * e.step_time_s * e.gpus * peak
    assert hw(out) - hw(mlp) == pytest.approx(extra, rel=1e-9)
    # what full recompute still adds over save_qkv_proj: the Q/K/V projections (and the elementwise ops)
    qkv = m.layers * sum(2.0 * g.k * g.n for g in attention_gemms(m) if g.name == "qkv") * tokens
    assert hw(full) - hw(out) == pytest.approx(qkv, rel=1e-9)


def test_maxtext_rows_recompute_as_their_remat_policy():
    rows = {r["id"]: r for r in load_rows("dgxc")}
    new = rows["dgxc_llama3-70b_h100_128gpu_bf16_maxtext25.01"]  # save_qkv_proj: all but Q/K/V recomputed
    lay = row_layout(new)[0]
    assert lay.recompute == "selective"
    assert set(framework_options(new, lay).recompute_modules) == {"core_attn", "layernorm", "mlp", "out_proj"}
    old = rows["dgxc_llama2-70b_h100_64gpu_bf16_maxtext-2024-12-09"]  # custom: qkv, out_proj, mlpwo kept
    lay = row_layout(old)[0]
    assert lay.recompute == "selective"
    # the note in parentheses names out_proj as *kept*: only the module list before it counts
    assert set(framework_options(old, lay).recompute_modules) == {"core_attn", "layernorm", "mlp"}
