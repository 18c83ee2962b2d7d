"""Memory per GPU: weights, gradients, optimizer states, activations, buffers (docs/plan.md).

Bytes per parameter (Megatron-LM distributed-optimizer table, perf_anchors.md; Korthikanti Fig. 1
matches 18 bytes/param): 16-bit weights 2, fp32 main gradients 4, fp32 master weights + Adam m, v
12 -> 18 = 6 + 12/d with a distributed optimizer (ZeRO-1). ZeRO-2 also shards the gradients,
ZeRO-3 (FSDP) also the weights, keeping two layers gathered (the one computing and the prefetch).
FP8 training (Transformer Engine) keeps an FP8 copy of the weights: +1 byte.
Shard group: dp*cp ranks for dense parameters (CP ranks hold the same weights), dp*cp/ep for
routed experts (experts are sharded over the data-parallel ranks, Megatron-Core).

Activations of the first pipeline stage (the one holding the most; Korthikanti section 4.2.3):
1F1B keeps min(pp, m) micro-batches of L/pp layers; interleaving multiplies by (1 + (pp-1)/(pp*vpp)).
Buffers: a fixed 2 GiB (CUDA context, NCCL and cuBLAS workspaces) plus 5% allocator fragmentation
of everything else -- an assumption (PyTorch caching allocator; typical nvidia-smi overheads).
Sizes are in GiB (2^30 bytes), the unit of the HBM capacities in the catalog and of Korthikanti Fig. 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wanka.layout import Layout
from wanka.plan.memo import memo_by_identity
from wanka.workload.activations import layer_activations, logits_bytes
from wanka.workload.params import attention_params, mlp_params, norm_params
from wanka.workload.spec import ModelSpec

GiB = float(1 << 30)
BUFFER_FIXED_GiB = 2.0
FRAGMENTATION = 0.05


@dataclass(frozen=True)
class Memory:
    weights_GiB: float
    gradients_GiB: float
    optimizer_GiB: float
    activations_GiB: float
    buffers_GiB: float

    @property
    def total_GiB(self) -> float:
        return self.weights_GiB + self.gradients_GiB + self.optimizer_GiB + self.activations_GiB + self.buffers_GiB

    @property
    def params_grads_optimizer_GiB(self) -> float:
        return self.weights_GiB + self.gradients_GiB + self.optimizer_GiB


def stage_layers(m: ModelSpec, pp: int, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of a pipeline stage; layers split as evenly as possible,
    leading stages taking the remainder (the first stage is the fullest)."""
    base, extra = divmod(m.layers, pp)
    start = stage * base + min(stage, extra)
    n = base + (1 if stage < extra else 0)
    dense_total = m.layers - m.moe_layers
    dense = max(0, min(start + n, dense_total) - start)
    return dense, n - dense


def _stage_params(m: ModelSpec, lay: Layout, stage: int) -> tuple[float, float]:
    """(non-expert params on one GPU, routed-expert params on one GPU) of a stage."""
    dense, moe = stage_layers(m, lay.pp, stage)
    common = attention_params(m) + 2 * norm_params(m)
    non_expert = (dense + moe) * common + dense * mlp_params(m, m.ffn_hidden)
    expert = 0.0
    if m.moe is not None and moe:
        e = mlp_params(m, m.moe.ffn_hidden)
        non_expert += moe * (m.moe.shared_experts * e + m.moe.experts * m.hidden)
        expert = moe * m.moe.experts * e / lay.ep
    if stage == 0:
        non_expert += m.vocab * m.hidden
    if stage == lay.pp - 1:
        non_expert += (0 if m.tied_embeddings else m.vocab * m.hidden) + norm_params(m)
    return non_expert / lay.tp, expert / lay.tp


def _activation_bytes(m: ModelSpec, lay: Layout, stage: int, seq: int, attention: str) -> float:
    s_local = seq // lay.cp
    sp = lay.sequence_parallel
    dense, moe = stage_layers(m, lay.pp, stage)
    per_mb = 0.0
    worst_layer = 0.0
    for count, is_moe in ((dense, False), (moe, True)):
        if count:
            a = layer_activations(m, lay.mbs, s_local, is_moe, attention)
            per_mb += count * a.stored(lay.tp, sp, lay.recompute)
            worst_layer = max(worst_layer, a.stored(lay.tp, sp, "none"))
    in_flight = min(lay.pp - stage, lay.microbatches) if lay.pp > 1 else 1
    factor = 1 + (lay.pp - 1) / (lay.pp * lay.vpp) if lay.vpp > 1 else 1.0
    total = per_mb * in_flight * factor
    if lay.recompute == "full":
        total += worst_layer  # the layer being recomputed holds its full activations
    if stage == lay.pp - 1:
        total += logits_bytes(m, lay.mbs, s_local, lay.tp)
    return total


@memo_by_identity(1)
def memory_per_gpu(m: ModelSpec, lay: Layout, seq: int, attention: str = "flash") -> Memory:
    """The fullest pipeline stage (`lay` resolved): first, last and one of each dense/MoE mix."""
    best = None
    seen = set()
    for stage in range(lay.pp):
        key = (stage_layers(m, lay.pp, stage), stage == 0, stage == lay.pp - 1)
        if key in seen:
            continue
        seen.add(key)
        mem = _stage_memory(m, lay, stage, seq, attention)
        if best is None or mem.total_GiB > best.total_GiB:
            best = mem
    return best


def _stage_memory(m: ModelSpec, lay: Layout, stage: int, seq: int, attention: str) -> Memory:
    dense_p, expert_p = _stage_params(m, lay, stage)
    shard = lay.dp * lay.cp
    if lay.zero == 3 and lay.dp_shard:
        shard = lay.dp_shard * lay.cp
    expert_shard = max(1, shard // lay.ep)
    w_bytes = 3.0 if lay.precision == "fp8" else (4.0 if lay.precision == "fp32" else 2.0)
    z = lay.zero

    def sharded(params_dense: float, params_expert: float, on: bool) -> float:
        return params_dense / shard + params_expert / expert_shard if on else params_dense + params_expert

    weights = w_bytes * sharded(dense_p, expert_p, z >= 3)
    if z >= 3:  # two layers gathered at a time (compute + prefetch)
        n_layers = max(1, sum(stage_layers(m, lay.pp, stage)))
        weights += 2 * w_bytes * (dense_p + expert_p) / n_layers
    grads = 4.0 * sharded(dense_p, expert_p, z >= 2)
    optim = 12.0 * sharded(dense_p, expert_p, z >= 1)
    acts = _activation_bytes(m, lay, stage, seq, attention)
    buffers = BUFFER_FIXED_GiB * GiB + FRAGMENTATION * (weights + grads + optim + acts)
    return Memory(weights / GiB, grads / GiB, optim / GiB, acts / GiB, buffers / GiB)


def fits(mem: Memory, hbm_GB: float) -> bool:
    return mem.total_GiB <= hbm_GB and math.isfinite(mem.total_GiB)
