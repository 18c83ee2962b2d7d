"""Routed-expert GEMMs stream every local expert's weights from HBM (a grouped GEMM)."""

from wanka.hardware.catalog import gpu as load_gpu
from wanka.plan import efficiency as E
from wanka.plan.compute import layer_time
from wanka.workload import load_model


def test_a_gpu_holding_all_experts_reads_all_their_weights():
    m = load_model("deepseek-v3")
    gpu = load_gpu("h800")
    few_tokens = layer_time(m, gpu, True, 1, 128, 128, 1, 1, False, "none", "bf16", "flash")  # ep=1: 256 experts
    spread = layer_time(m, gpu, True, 1, 128, 128, 1, 256, False, "none", "bf16", "flash")  # ep=256: one expert
    per_expert_bytes = 3 * m.hidden * m.moe.ffn_hidden * 2  # gate, up, down in bf16
    assert few_tokens.fwd_s >= m.moe.experts * per_expert_bytes / E.hbm_Bps(gpu)
    assert spread.fwd_s < few_tokens.fwd_s / 10  # the same FLOPs, 1/256 of the weights
