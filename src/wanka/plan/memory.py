"""Memory per GPU: weights, gradients, optimizer states, activations, buffers (docs/plan.md).

Bytes per parameter (Megatron-LM distributed-optimizer table, perf_anchors.md; Korthikanti Fig. 1
matches 18 bytes/param): 16-bit weights 2, fp32 main gradients 4, fp32 master weights + Adam m, v
12 -> 18 = 6 + 12/d with a distributed optimizer (ZeRO-1). ZeRO-2 also shards the gradients,
ZeRO-3 (FSDP) also the weights, keeping two layers gathered (the one computing and the prefetch).
FP8 training (Transformer Engine) keeps an FP8 copy of the weights: +1 byte. With FP8 parameters
(Megatron-Core --fp8-param-gather, NeMo fp8_params: the weights are created by TE's fp8_model_init as
FP8 tensors, and the distributed optimizer casts its fp32 master shard straight to them) there is no
16-bit weight: 1 byte per weight.
Shard group: dp*cp ranks for dense parameters (CP ranks hold the same weights), dp*cp/ep for
routed experts (experts are sharded over the data-parallel ranks, Megatron-Core).

Activations in flight on pipeline rank r (Megatron-Core schedules.py warm-up counts; Korthikanti
section 4.2.3 gives the r = 0, m >= pp case): 1F1B keeps min(m, pp - r) micro-batches of the rank's
layers; the interleaved schedule runs 2(pp-1-r) + (vpp-1)*pp warm-up chunk forwards, so it keeps
min(m, pp + (pp-1-2r)/vpp) micro-batches' worth of the rank's layers (pp + (pp-1)/vpp at r = 0,
i.e. Korthikanti's factor 1 + (pp-1)/(pp*vpp)); never more than the m micro-batches of the step
(with m <= pp every forward of the step is in flight, interleaved or not).
Layer split: layers that do not divide evenly go to the middle stages first, so the first stage
(embedding, most micro-batches in flight) and the last (output layer, loss) get fewer -- what
Llama 3 405B did (126 layers on 16 stages: 7, 8 x 14, 7; arXiv:2407.21783 s.3.3.2) and what
Megatron-Core's --account-for-embedding/loss-in-pipeline-split options do.
ZeRO-2 keeps only a gradient shard (fp32): the gradients are reduce-scattered every micro-batch
(wanka.plan.exposure) -- Llama 3's FSDP "shards the optimizer states and gradients" (s.3.3.2).
Buffers: a fixed 2 GiB (CUDA context, NCCL and cuBLAS workspaces) plus 5% allocator fragmentation
of everything else -- an assumption (PyTorch caching allocator; typical nvidia-smi overheads).
Sizes are in GiB (2^30 bytes), the unit of the HBM capacities in the catalog and of Korthikanti Fig. 1.
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

from wanka.layout import Layout
from wanka.resolved_layout import ResolvedLayout
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


def _layers_on(base: int, extra: int, pp: int, stage: int) -> int:
    """Layers of `stage` when `extra` stages take base+1: middle stages first, then the last."""
    if pp <= 2:
        return base + (1 if stage < extra else 0)
    order = stage - 1 if 0 < stage < pp - 1 else (pp - 2 if stage == pp - 1 else pp - 1)
    return base + (1 if order < extra else 0)


def stage_layers(m: ModelSpec, pp: int, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of a pipeline stage; layers split as evenly as possible, the
    remainder on the middle stages (first and last stage lighter, as Llama 3 405B)."""
    return _split(m.layers, m.layers - m.moe_layers, pp, stage)


def distinct_stages(m: ModelSpec, pp: int) -> tuple[int, ...]:
    """The lowest-ranked stage of each kind ((dense, MoE) mix, first, last): the one of its kind
    with the most micro-batches in flight."""
    return _distinct(m.layers, m.layers - m.moe_layers, pp)


@lru_cache(maxsize=4096)
def _distinct(layers: int, dense_total: int, pp: int) -> tuple[int, ...]:
    seen, out = set(), []
    for i in range(pp):
        key = (_split(layers, dense_total, pp, i), i == 0, i == pp - 1)
        if key not in seen:
            seen.add(key)
            out.append(i)
    return tuple(out)


@lru_cache(maxsize=65536)
def _split(layers: int, dense_total: int, pp: int, stage: int) -> tuple[int, int]:
    base, extra = divmod(layers, pp)
    n = _layers_on(base, extra, pp, stage)
    if pp <= 2 or stage == 0:
        start = stage * base + min(stage, extra)
    else:  # stage 0, then stages 1..stage-1 (the first `extra` middle stages take one more)
        start = _layers_on(base, extra, pp, 0) + (stage - 1) * base + min(stage - 1, extra)
    dense = max(0, min(start + n, dense_total) - start)
    return dense, n - dense


def _stage_params(m: ModelSpec, lay: Layout, stage: int) -> tuple[float, float]:
    """(non-expert params on one GPU, routed-expert params on one GPU) of a stage."""
    return _stage_params_of(m, lay.pp, lay.tp, lay.ep, lay.expert_tp, stage)


@memo_by_identity(1)  # the search asks for the same (pp, tp, ep, etp, stage) for every dp, mbs, zero
def _stage_params_of(m: ModelSpec, pp: int, tp: int, ep: int, expert_tp: int, stage: int) -> tuple[float, float]:
    dense, moe = stage_layers(m, pp, stage)
    common = attention_params(m) + 2 * norm_params(m)
    non_expert = (dense + moe) * common + dense * mlp_params(m, m.ffn_hidden)
    expert = 0.0
    if m.moe is not None and moe:
        e = mlp_params(m, m.moe.ffn_hidden)
        non_expert += moe * (m.moe.shared_experts * e + m.moe.experts * m.hidden)
        expert = moe * m.moe.experts * e / ep * tp / expert_tp  # /tp below
    if stage == 0:
        non_expert += m.vocab * m.hidden
    if stage == pp - 1:
        non_expert += (0 if m.tied_embeddings else m.vocab * m.hidden) + norm_params(m)
    return non_expert / tp, expert / tp


def in_flight_microbatches(lay: ResolvedLayout, stage: int) -> float:
    """Micro-batches whose activations (of all the rank's layers) are alive at the peak."""
    if lay.pp <= 1:
        return 1.0
    m = lay.microbatches
    if lay.vpp <= 1:
        return float(min(m, lay.pp - stage))
    warmup_chunks = 2 * (lay.pp - 1 - stage) + (lay.vpp - 1) * lay.pp
    return min(float(m), (warmup_chunks + 1) / lay.vpp)


def _per_microbatch(m: ModelSpec, lay: Layout, stage: int, seq: int, attention: str,
                    modules: tuple[str, ...], fp8: bool) -> tuple[float, float]:
    """(activation bytes of one micro-batch through the stage's layers, the largest layer's
    activations without recompute)."""
    return _per_microbatch_of(m, lay.pp, lay.tp, lay.cp, lay.sequence_parallel, lay.mbs, lay.recompute, stage, seq,
                              attention, modules, fp8)


@memo_by_identity(1)  # the same stage shape recurs for every dp, vpp, ep, zero of the search
def _per_microbatch_of(m: ModelSpec, pp: int, tp: int, cp: int, sp: bool, mbs: int, recompute: str, stage: int,
                       seq: int, attention: str, modules: tuple[str, ...], fp8: bool) -> tuple[float, float]:
    s_local = seq // cp
    dense, moe = stage_layers(m, pp, stage)
    extra = modules if recompute == "selective" else ()
    mode = recompute if (recompute != "selective" or "core_attn" in modules) else "none"
    per_mb = worst_layer = 0.0
    for count, is_moe in ((dense, False), (moe, True)):
        if count:
            a = layer_activations(m, mbs, s_local, is_moe, attention, extra, fp8)
            per_mb += count * a.stored(tp, sp, mode)
            worst_layer = max(worst_layer, a.stored(tp, sp, "none"))
    return per_mb, worst_layer


def _activation_bytes(m: ModelSpec, lay: Layout, stages: tuple[int, ...], seq: int, attention: str,
                      modules: tuple[str, ...], fp8: bool) -> float:
    """Activations of a pipeline rank holding `stages` (one stage; two with DualPipe)."""
    parts = [_per_microbatch(m, lay, st, seq, attention, modules, fp8) for st in stages]
    if len(stages) == 1:
        total = parts[0][0] * in_flight_microbatches(lay, stages[0])
    else:  # DualPipe: PP+1 micro-batches of one stage's worth (DeepSeek-V3 Table 2), two stages
        total = min(float(lay.microbatches), (lay.pp + 1) / 2) * sum(p[0] for p in parts)
    if lay.recompute == "full":
        total += max(p[1] for p in parts)  # the layer being recomputed holds its full activations
    if lay.pp - 1 in stages:
        total += logits_bytes(m, lay.mbs, seq // lay.cp, lay.tp)
    return total


def rank_stages(lay: Layout, rank: int, dualpipe: bool) -> tuple[int, ...]:
    """Pipeline stages a rank holds: its own; with DualPipe also the mirror stage pp-1-rank of the
    reverse direction (DeepSeek-V3 s.3.2.1: two copies of the parameters)."""
    if dualpipe and lay.pp > 1 and rank != lay.pp - 1 - rank:
        return (rank, lay.pp - 1 - rank)
    return (rank,)


@memo_by_identity(1)
def memory_per_gpu(m: ModelSpec, lay: Layout, seq: int, attention: str = "flash",
                   modules: tuple[str, ...] = ("core_attn",), fp8_cache: bool = True,
                   dualpipe: bool = False, fp8_params: bool = False) -> Memory:
    """The fullest pipeline rank (`lay` resolved). `modules`: what recompute=selective recomputes
    (Megatron-Core --recompute-modules); `fp8_cache`: FP8 runs cache GEMM inputs in FP8;
    `dualpipe`: DeepSeek's bidirectional schedule (each rank holds two mirrored stages);
    `fp8_params`: FP8 runs keep the weights in FP8 only (Options.fp8_params)."""
    lay = ResolvedLayout.of(lay)  # micro-batches and shard sizes (a plain Layout needs dp and gbs set)
    best = None
    ranks = range((lay.pp + 1) // 2) if dualpipe else distinct_stages(m, lay.pp)
    for rank in ranks:
        stages = rank_stages(lay, rank, dualpipe)
        mem = _stage_memory(m, lay, stages, seq, attention, modules, fp8_cache and lay.precision == "fp8",
                            fp8_params and lay.precision == "fp8")
        if best is None or mem.total_GiB > best.total_GiB:
            best = mem
    return best


def _stage_memory(m: ModelSpec, lay: Layout, stages: tuple[int, ...], seq: int, attention: str,
                  modules: tuple[str, ...], fp8: bool, fp8_params: bool = False) -> Memory:
    dense_p = expert_p = 0.0
    for st in stages:
        d, e = _stage_params(m, lay, st)
        dense_p, expert_p = dense_p + d, expert_p + e
    shard, expert_shard = lay.zero_shards
    w_bytes = 3.0 if lay.precision == "fp8" else (4.0 if lay.precision == "fp32" else 2.0)
    if fp8_params:  # FP8 weights only (module docstring)
        w_bytes = 1.0
    z = lay.zero

    def sharded(params_dense: float, params_expert: float, on: bool) -> float:
        return params_dense / shard + params_expert / expert_shard if on else params_dense + params_expert

    weights = w_bytes * sharded(dense_p, expert_p, z >= 3)
    if z >= 3:  # two layers gathered at a time (compute + prefetch)
        n_layers = max(1, sum(sum(stage_layers(m, lay.pp, st)) for st in stages))
        weights += 2 * w_bytes * (dense_p + expert_p) / n_layers
    grads = 4.0 * sharded(dense_p, expert_p, z >= 2)
    optim = 12.0 * sharded(dense_p, expert_p, z >= 1)
    acts = _activation_bytes(m, lay, stages, seq, attention, modules, fp8)
    buffers = BUFFER_FIXED_GiB * GiB + FRAGMENTATION * (weights + grads + optim + acts)
    return Memory(weights / GiB, grads / GiB, optim / GiB, acts / GiB, buffers / GiB)


def fits(mem: Memory, hbm_GB: float) -> bool:
    return mem.total_GiB <= hbm_GB and math.isfinite(mem.total_GiB)
