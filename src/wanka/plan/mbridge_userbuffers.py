"""Megatron-Bridge's named Transformer Engine userbuffers configurations (TP communication overlap).

Megatron-Bridge's performance scripts pass a named `TransformerLayerTPOverlapCfg` as
`cfg.comm_overlap.tp_comm_overlap_cfg` (scripts/performance/configs/llama/llama31_llm_pretrain.py).
Each names, per GEMM of a layer, how its sequence-parallel collective is hidden: RingExchangeOverlapCfg
(the all-gather / reduce-scatter moves chunk by chunk under the GEMM of the chunk in hand), BulkOverlapCfg
(the dgrad collective runs whole beside the wgrad GEMM; its `*_wgrad` entry is the other half of the same
bulk pair, so the table keeps the eight collectives as plan/frameworks.py MLPERF_USERBUFFERS does) or
PipelineOverlapCfg(num_splits=k) (the GEMM in k chunks, the last chunk's reduce-scatter exposed).

Source: NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/comm_overlap.py, identical at v0.1.0rc3
(bf71eba0, NeMo 25.09: selected by scripts/performance/utils/helpers.py COMM_OVERLAP_CONFIG_MAP in run_script.py),
v0.2.0 (717c62de, NeMo 25.11), v0.3.0 (21b02e0c, 26.02), v0.4.0 (0fbfe7d3, 26.04) and v0.5.0 (fcbb6031, 26.06).
A published row states the configuration its script selects (parallelism.comm_overlap); validate then
prices its TP overlap as userbuffers_hidden_fraction of the per-GEMM methods (docs/plan.md
"Megatron-Bridge userbuffers configurations"). Like MLPERF_USERBUFFERS, a hidden collective is hidden only
while its GEMM outlasts it (exposure.tp_exposed_gemm_bound still applies).

NeMo 2.0 defined the same names first (nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py), and its
performance scripts select them the same way (NVIDIA/NeMo scripts/performance/llm/pretrain_llama31_405b.py and
pretrain_llama3_70b.py `ub_cfg[gpu][dtype]` at 6f2c6fda, the commit dgxc-benchmarking pins for NeMo 25.04, and at
v2.3.0 2b03b748 - v2.3.2 f98ef1db; dgxc-benchmarking's own llama3.1/pretrain_llama31.py @741c886 on NeMo@d2b21556 for
NeMo 25.02). From v2.3.0 every name below means what Megatron-Bridge's does; at d2b21556 and v2.2.1 (132f2179) the two
H100 FP8 ones still pipelined proj_fprop and fc2_fprop (PipelineOverlapCfg(num_splits=4, fp8_buf=True)) as the BF16
ones do: a row that names "NeMo@v2.2" gets those.
"""

from __future__ import annotations

import re

from wanka.plan.frameworks import userbuffers_hidden_fraction

_RING, _BULK = ("ring_exchange", 1), ("bulk", 1)
# Every FP8 configuration below: qkv/fc1 dgrad bulk, the rest ring exchange (comm_overlap.py lines 164-201 @v0.5.0)
_ALL_RING_OR_BULK = {"qkv_fprop": _RING, "proj_fprop": _RING, "fc1_fprop": _RING, "fc2_fprop": _RING,
                     "qkv_dgrad": _BULK, "proj_dgrad": _RING, "fc1_dgrad": _BULK, "fc2_dgrad": _RING}
# Every BF16 configuration below: proj_fprop and fc2_fprop PipelineOverlapCfg(num_splits=4), the rest as above
_PIPELINED_FPROP = dict(_ALL_RING_OR_BULK, proj_fprop=("pipeline", 4), fc2_fprop=("pipeline", 4))
MBRIDGE_USERBUFFERS = {
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": _ALL_RING_OR_BULK,
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": _ALL_RING_OR_BULK,
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": _PIPELINED_FPROP,
    # Llama 3 70B (hidden 8192): comm_overlap.py lines 98-148 @v0.4.0 (the same at v0.1.0rc3 lines 95-146)
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": _ALL_RING_OR_BULK,
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": _ALL_RING_OR_BULK,
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": _PIPELINED_FPROP,
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": _PIPELINED_FPROP,
    # the H100 BF16 Llama 3.1 405B one, as NeMo defines it (userbuffers.py lines 137-148 @v2.3.0, 132-143 @v2.2.1)
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": _PIPELINED_FPROP,
}
# NeMo v2.2.1's userbuffers.py lines 92-103 and 145-156: the H100 FP8 configurations with pipelined fprop collectives
NEMO_V2_2_USERBUFFERS = dict(MBRIDGE_USERBUFFERS, userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192=_PIPELINED_FPROP,
                             userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192=_PIPELINED_FPROP)
_NAMED = re.compile(r"\buserbuffers_\w+")
_NEMO_V2_2 = re.compile(r"\bnemo@v2\.2\b", re.I)


def stated_tp_overlap(text: str) -> float | None:
    """The hidden share of a layer's TP traffic under the userbuffers configuration `text` names (a
    row's comm_overlap), or None where it names none of MBRIDGE_USERBUFFERS. A text naming "NeMo@v2.2" reads the
    names as that release defined them (NEMO_V2_2_USERBUFFERS)."""
    text = str(text or "")
    table = NEMO_V2_2_USERBUFFERS if _NEMO_V2_2.search(text) else MBRIDGE_USERBUFFERS
    for name in _NAMED.findall(text):
        if name in table:
            return userbuffers_hidden_fraction(table[name])
    return None
