"""What an MoE layer costs beyond its GEMMs: routing imbalance and the tensor-parallel traffic of
the routed tokens (docs/plan.md "MoE").

Routing imbalance. The all-to-all combine waits for the slowest EP rank, so the expert GEMMs and
the dispatch/combine volume of a layer are set by the most-loaded rank, not the mean. Even a
perfectly balanced router (every expert equally likely; aux-loss-free balancing, DeepSeek-V3
s.2.1.2, drives the expected loads to equal) leaves the multinomial spread of one micro-batch: N
routed copies over ep ranks (E/ep experts each) put Binomial(N, 1/ep) on a rank, mean N/ep, standard
deviation sqrt(N (1/ep)(1 - 1/ep)), and the largest of ep such counts exceeds the mean by the
expected maximum of ep standard normals, Phi^-1((ep - 0.375) / (ep + 0.25)) standard deviations
(Blom's approximation of normal order statistics, Blom 1958; tests check it against a sampled
multinomial). That floor is small for training micro-batches (about 2% for 32k routed
copies on 8 ranks) and large for small ones. A trained router is less balanced than that floor;
published figures (e.g. the balancedness = mean/max token load per EP rank that vLLM exports,
vllm/distributed/eplb/eplb_state.py, for deployments balanced by deepseek-ai/EPLB) go in
`Options.moe_imbalance` (max/mean = 1/balancedness), which replaces the floor.

Capacity factor (token-dropping MoE: Switch Transformer, Fedus et al. 2021, s.2.2; GShard): an
expert takes at most capacity_factor x (routed tokens / experts); the dispatch buffers are padded
to that capacity (DeepSpeed-MoE sharded_moe.py: dispatch to [experts, capacity, hidden]; Megatron-Core
--moe-pad-expert-input-to-capacity), so the experts' GEMMs and the all-to-all move capacity-sized
buffers: load factor = capacity_factor, whatever the routing (`Options.moe_capacity_factor`).

Tensor-parallel traffic of the routed tokens (Megatron-Core transformer/moe/token_dispatcher.py,
MoEAlltoAllTokenDispatcher). A dense MLP under sequence parallelism all-gathers its input and
reduce-scatters its output over the TP group: one token's h values each way. An MoE layer does
instead:
  * experts split over the TP ranks (etp = tp > 1): after the EP all-to-all the routed tokens are
    all-gathered over the (expert-)TP group and reduce-scattered after the experts -- top_k copies
    of every token, top_k times the dense MLP's bytes (1 < etp < tp: priced on the TP group, an
    approximation), never hidden by TE's TP overlap (moe_layer_tp_comm_s);
  * experts not TP-split (etp = 1): the sequence-parallel tokens go straight into the all-to-all
    over the ep*etp ranks: no TP collective for the routed experts;
  * shared experts are TP-split like a dense MLP: one dense MLP's all-gather + reduce-scatter.

How the routed tokens reach the experts and the experts run (Options.moe_dispatcher,
moe_grouped_gemm): Megatron-Core's all-gather dispatcher and SequentialMLP, byte by byte from their
code, below (moe_dispatch_bytes, allgather_dispatch_comm_s).
"""

from __future__ import annotations

import math
from statistics import NormalDist


def balanced_router_imbalance(routed_copies: float, ep: int) -> float:
    """Expected max/mean routed copies per EP rank for a router that picks every expert with equal
    probability (the multinomial floor above). `routed_copies`: the EP group's routed (token,
    expert) pairs of one micro-batch."""
    if ep <= 1 or routed_copies <= 0:
        return 1.0
    p = 1.0 / ep
    mean = routed_copies * p
    sd = math.sqrt(routed_copies * p * (1 - p))
    z_max = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))  # E[max of ep standard normals] (Blom)
    return 1.0 + z_max * sd / mean


def moe_imbalance(lay, tokens_per_rank: float, top_k: int, override: float | None,
                  capacity_factor: float | None = None) -> float:
    """max/mean routed load per EP rank of one micro-batch: with a capacity factor the padded
    buffers (capacity_factor x the mean, Switch Transformer s.2.2); else `override`
    (Options.moe_imbalance); else the balanced-router floor for the EP group's tokens
    (`tokens_per_rank` tokens on each rank)."""
    if capacity_factor is not None:
        return capacity_factor
    if override is not None:
        return override
    return balanced_router_imbalance(tokens_per_rank * top_k * lay.ep, lay.ep)


def moe_layer_tp_comm_s(lay, top_k: int, shared_experts: int, tp_dense_s: float, tp_raw_s: float) -> float:
    """TP communication of one MoE layer forward (backward the same), all-to-all dispatcher.
    `tp_dense_s`: a dense layer's (attention + MLP: two all-gather/reduce-scatter pairs) after the
    framework's TP overlap; `tp_raw_s`: the same without the overlap. The attention's pair and the
    shared experts' (TP-split linear layers, like a dense MLP) are overlapped as a dense layer's.
    The routed copies' pair over the expert-TP group (etp > 1; top_k x a dense MLP's bytes) is not:
    Megatron-Core core_r0.11.0 token_dispatcher.py MoEAlltoAllTokenDispatcher.token_permutation calls
    gather_from_sequence_parallel_region(global_input_tokens, group=self.tp_group) after the EP
    all-to-all and token_unpermutation reduce_scatter_to_sequence_parallel_region before the combine:
    plain collectives on the compute stream, outside Transformer Engine's linear layers, so
    --tp-comm-overlap's userbuffers (which fuse only the collectives of TE's column/row-parallel
    linears) never see them. With etp = 1 the sequence-parallel tokens go straight into the all-to-all
    over ep x etp ranks: no TP collective for the routed experts."""
    if lay.tp <= 1:
        return 0.0
    routed = float(top_k) if lay.expert_tp > 1 else 0.0
    return tp_dense_s * (1.0 + (1.0 if shared_experts else 0.0)) / 2.0 + tp_raw_s * routed / 2.0


# How the routed tokens reach the experts and the experts run (Options.moe_dispatcher,
# Options.moe_grouped_gemm; docs/plan.md "MoE"). Bytes per hidden element moved through HBM, each
# op's reads and writes, from the code the runs execute:
#
# All-gather dispatcher (Megatron-Core core_r0.6.0 transformer/moe/token_dispatcher.py
# MoEAllGatherTokenDispatcher, the default of --moe-token-dispatcher-type up to core_r0.9; as MindSpeed
# patches it, mindspeed/core/transformer/moe/token_dispatcher.py@e6ea2117, the commit MindSpeed-LLM's
# README pins). The hidden states of the whole tensor(-and-expert)-parallel group are all-gathered to
# every rank, so every rank permutes all the group's tokens at full hidden size (not 1/tp of them):
#   forward, per routed copy: global[map] gather 2+2, [indices] gather 2+2, zeros_like 2, index_put
#     2+2, x probs 2+2, .float() 2+4, fp32 index_put(accumulate) 4+4+4 = 36; per token of the group:
#     fp32 zeros 4, .to(bf16) 4+2 = 10;
#   backward (autograd of the same ops): index_select fp32 4+4, fp32->bf16 4+2, probs' product and its
#     gradient 2+2 + 2+2, gather 2+2, two advanced-index backwards (index_put accumulate into zeros)
#     2+2+4 each = 40 per copy; per token: bf16->fp32 2+4, zeros 2 = 8.
ALLGATHER_BYTES_PER_COPY = (36.0, 40.0)
ALLGATHER_BYTES_PER_TOKEN = (10.0, 8.0)
# Experts one after another (Megatron-Core core_r0.6.0 transformer/moe/experts.py SequentialMLP,
# without --moe-grouped-gemm): forward zeros_like(output) 2 + each expert's output copied into its
# slice 2+2 = 6 per copy. Backward, PyTorch autograd (checked with torch.profiler on a CPU copy of the
# loop): each of the E slices of the input has a SliceBackward (aten::slice_backward: a full-size
# zeros 2, its slice copied 2+2 in all), the E gradients are accumulated into one (E-1 add_, 2+2+2
# each), each of the E slice assignments is a CopySlices (the whole gradient cloned, 2+2, and the
# slice's own gradient 2+2 in all): 12 E + 4 per copy, E = local experts.
SEQUENTIAL_FWD_BYTES_PER_COPY = 6.0
KERNELS_PER_SEQUENTIAL_EXPERT_FWD = 4  # fc1, activation, fc2, the copy into the output slice


# Experts through Transformer Engine's GroupedLinear (TEGroupedMLP, --moe-grouped-gemm), default path:
# one cuBLAS GEMM per local expert, issued round-robin on a pool of CUDA streams
# (NVIDIA/TransformerEngine transformer_engine/common/gemm/cublaslt_gemm.cu multi_stream_cublas_gemm:
# `nvte_cublas_gemm_v2(... get_compute_stream(i % num_streams))` for i < num_gemms, then the caller's
# stream waits on every stream's event; include/transformer_engine/gemm.h `constexpr int num_streams
# = 4`; docs/features/mixture_of_experts/mixture_of_experts.rst "Grouped GEMM": "one cuBLAS GEMM per
# expert is launched on a pool of CUDA streams"; the single cuBLASLt grouped GEMM needs cuBLAS 13.3+,
# not assumed). Each stream runs ceil(E / 4) expert GEMMs back to back, each paying the per-kernel
# fixed cost (efficiency.KERNEL_OVERHEAD_S); the streams overlap one another.
TE_GROUPED_GEMM_STREAMS = 4


def grouped_gemm_extra_kernels_fwd(local_experts: float) -> float:
    """Kernels in series beyond one per grouped GEMM, for one MoE layer forward through TE's
    per-expert path: two grouped GEMMs (fc1, fc2), each ceil(E / 4) GEMMs deep on its busiest stream
    instead of the one kernel the layer's launch count (efficiency.KERNELS_PER_LAYER_FWD) holds.
    The backward (dgrad and wgrad grouped GEMMs of each) pays twice as many, as every launch does."""
    depth = math.ceil(max(1.0, local_experts) / TE_GROUPED_GEMM_STREAMS - 1e-9)
    return 2.0 * (depth - 1)

def sequential_bwd_bytes_per_copy(local_experts: float) -> float:
    e = max(1.0, local_experts)
    return 12.0 * e + 4.0


# All-to-all dispatcher, "Permutation 2" (Megatron-Core core_r0.11.0 token_dispatcher.py
# MoEAlltoAllTokenDispatcher.token_permutation / token_unpermutation): the all-to-all (and, with TP-split
# experts, the TP all-gather) delivers the routed copies grouped by source rank; with more than one
# local expert they are regrouped by expert before the experts (sort_chunks_by_idxs: split + cat, or
# TE's fused_sort_chunks_by_index; with --moe-pad-expert-input-to-capacity a transpose().contiguous())
# and back after them -- every copy this rank's experts take, at full hidden size (after the TP
# all-gather, not 1/tp of them): read 2 + write 2 each way = 8 B per hidden element forward; the
# backward's gradients take the inverse copies, 8 B.
SORT_BY_LOCAL_EXPERT_BYTES_PER_COPY = (8.0, 8.0)


def moe_dispatch_bytes(m, tokens: float, ep: int, tp: int, etp: int, imbalance: float, dispatcher: str,
                       grouped_gemm: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one MoE layer's token movement on one rank beyond the
    all-to-all dispatcher's permutation (which compute.layer_time prices as 8 h per copy, 1/tp of
    them): the all-to-all dispatcher's regrouping by local expert (SORT_BY_LOCAL_EXPERT_*), the
    all-gather dispatcher's (ALLGATHER_BYTES_*) and SequentialMLP's (above). `tokens`: the TP
    group's tokens of the micro-batch (mbs x local sequence)."""
    if m.moe is None:
        return 0.0, 0.0
    h = m.hidden
    copies = tokens * m.moe.top_k * (etp / tp) * imbalance  # routed copies this rank's experts take
    fwd = bwd = 0.0
    if dispatcher == "alltoall" and m.moe.experts / ep > 1:
        fwd += h * SORT_BY_LOCAL_EXPERT_BYTES_PER_COPY[0] * copies
        bwd += h * SORT_BY_LOCAL_EXPERT_BYTES_PER_COPY[1] * copies
    if dispatcher == "allgather":
        group_tokens = tokens * ep  # all-gathered over the tensor-and-expert group
        fwd += h * (ALLGATHER_BYTES_PER_COPY[0] * copies + ALLGATHER_BYTES_PER_TOKEN[0] * group_tokens)
        bwd += h * (ALLGATHER_BYTES_PER_COPY[1] * copies + ALLGATHER_BYTES_PER_TOKEN[1] * group_tokens)
    if not grouped_gemm:
        fwd += h * SEQUENTIAL_FWD_BYTES_PER_COPY * copies
        bwd += h * sequential_bwd_bytes_per_copy(m.moe.experts / ep) * copies
    return fwd, bwd


def allgather_dispatch_comm_s(cluster, lay, act_bytes: float, algorithm: str) -> float:
    """The all-gather dispatcher's collectives of one MoE layer forward (backward the same): the
    hidden states all-gathered over the tensor-and-expert-parallel group (etp x ep ranks, etp
    innermost: contiguous when etp = tp) and the combined output reduce-scattered back, in BF16
    (core_r0.6.0 gather_from_sequence_parallel_region_to_moe / reduce_scatter_to_sequence_parallel_
    region_from_moe). They run outside the linear layers, so neither Transformer Engine's userbuffers
    nor MindSpeed's MC2 (both fuse the collectives of ColumnParallelLinear/RowParallelLinear) hide
    them; MindSpeed-LLM even restores the experts' plain linear forwards under MC2
    (modellink/core/models/gpt/gpt_layer_specs.py build_layers_wrapper@75f2e902022c)."""
    from wanka.plan.exposure import _ct

    size, stride = lay.expert_tp * lay.ep, lay.group("etp")[1]
    nbytes = act_bytes * lay.ep  # the gathered tensor: every rank's tokens of the group
    return (_ct(cluster, "all_gather", nbytes, size, stride, algorithm)
            + _ct(cluster, "reduce_scatter", nbytes, size, stride, algorithm))


def shared_expert_overlap_ep_s(ep_fwd_s: float, shared_fwd_s: tuple[float, ...]) -> tuple[float, float]:
    """(forward, backward) exposed EP all-to-all of one MoE layer under --moe-shared-expert-overlap.
    `ep_fwd_s`: the layer's dispatch + combine forward (two equal all-to-alls); `shared_fwd_s`: the
    shared experts' (up, down) GEMM forward times. Megatron-Core core_r0.11.0 token_dispatcher.py
    MoEAlltoAllTokenDispatcher: token_permutation issues the dispatch all-to-all and then
    shared_experts.linear_fc1_forward_and_act on the shared experts' own stream; token_unpermutation the
    combine all-to-all and then linear_fc2_forward (shared_experts.py SharedExpertMLP, `stream`), so the
    up GEMM runs beside the dispatch and the down GEMM beside the combine; the backward keeps the pairing
    (set_tensor_grad_fn_sequence_sr orders the shared experts' gradient functions next to the
    all-to-alls'), each GEMM's backward (dgrad + wgrad) twice its forward. Each all-to-all shows only
    where it outlasts its GEMM: max(0, a2a - G). The shared experts' own TP all-gather/reduce-scatter,
    which move to that stream too, stay priced as before (an approximation)."""
    if len(shared_fwd_s) != 2:
        return ep_fwd_s, ep_fwd_s
    one = ep_fwd_s / 2
    up, down = shared_fwd_s
    fwd = max(0.0, one - up) + max(0.0, one - down)
    bwd = max(0.0, one - 2 * up) + max(0.0, one - 2 * down)
    return fwd, bwd


def moe_execution_of_row(parallelism: dict) -> dict:
    """Options fields for how a published run's MoE layers ran, from its row: `moe_token_dispatcher`
    (the script's --moe-token-dispatcher-type, or the default it ran with) and `moe_grouped_gemm`
    (whether it passed --moe-grouped-gemm); nothing for a row that says neither."""
    kw = {}
    dispatcher = str(parallelism.get("moe_token_dispatcher") or "").lower()
    if dispatcher in ("allgather", "alltoall"):
        kw["moe_dispatcher"] = dispatcher
    if isinstance(parallelism.get("moe_grouped_gemm"), bool):
        kw["moe_grouped_gemm"] = parallelism["moe_grouped_gemm"]
    # --moe-shared-expert-overlap (Options.moe_shared_expert_overlap) is not read from rows: with it the
    # Qwen2 Folding rows, the only ones that state it, go +5..+16% (docs/plan.md "MoE, fourth pass")
    return kw
