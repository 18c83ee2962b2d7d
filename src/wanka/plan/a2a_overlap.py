"""Megatron-Core's EP all-to-all overlap (`overlap_moe_expert_parallel_comm`, Megatron-Bridge's
`moe_a2a_overlap`): the forward of one micro-batch and the backward of another run layer by layer
on two CUDA streams, each all-to-all beside the other micro-batch's computation (docs/plan.md
"MoE, all-to-all overlap across micro-batches").

Source: NVIDIA/Megatron-LM megatron/core/models/common/model_chunk_schedule_plan.py
(TransformerLayerSchedulePlan.run, @d98e8a64) issues, per layer pair (forward layer i of micro-batch
k+1, backward layer L-1-i of micro-batch k):

    comm stream: combine_bwd      | dispatch_fwd -> dispatch_bwd           | combine_fwd
    comp stream: pre_dispatch_fwd | mlp_bwd -> mlp_bwd_dw -> mlp_fwd      | pre_dispatch_bwd (-> its dw)

Every node of one micro-batch waits for the previous node of that micro-batch (the schedule plan's
shared CUDA event: pipeline_parallel/utils.py ScheduleNode), so the forward runs the chain
attention -> dispatch -> experts -> combine -> next layer's attention, and the backward combine ->
experts (dgrad) -> dispatch -> attention (dgrad) -> the next lower layer's combine. With
`delay_wgrad_compute` the weight gradients (backward_dw) are queued on the compute stream without
joining the chain, so the backward dispatch starts after the experts' dgrad; without it the weight
gradients are part of each backward node. combined_1f1b.py pairs micro-batches k+1 and k for every
k < m-1; the first forward and the last backward run alone (no overlap); with a pipeline, the warmup
and cooldown passes of the interleaved schedule run alone (unpaired_share).

Priced: that two-stream timeline for one stage's MoE layers, simulated event by event in issue order
(each stream runs its kernels in order; a kernel starts when its stream is free and its micro-batch's
previous node is done); computation beside a running all-to-all runs on the SMs the dispatch kernels
leave (dispatcher_sm_share: DeepEP/HybridEP hold a set number of SMs, Options.moe_dispatcher_sms). What it
does not model: SMs held by NCCL's all-to-all, any slowdown of the all-to-all itself, and the dense
layers, which have no all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerPieces:
    """One MoE layer of one micro-batch, seconds: forward of the part before the dispatch
    (attention, router: `pre_fwd`) and of the routed experts (`mlp_fwd`); their backward split into
    the data gradient and the weight gradient; one all-to-all (`a2a`: dispatch and combine, forward
    and backward, each this long)."""

    pre_fwd: float
    mlp_fwd: float
    pre_dgrad: float
    pre_wgrad: float
    mlp_dgrad: float
    mlp_wgrad: float
    a2a: float


def paired_layers_s(p: LayerPieces, layers: int, delay_wgrad: bool = True, comm_sm_share: float = 0.0) -> float:
    """Seconds for `layers` MoE layers of one forward and one backward (other micro-batches) run as
    TransformerLayerSchedulePlan.run pairs them: the end of the later of the two streams.
    `comm_sm_share`: the fraction of the GPU's SMs the dispatch/combine kernels hold while they run;
    computation beside a running all-to-all proceeds at 1 - that rate (0: the streams do not slow each
    other)."""
    if layers <= 0:
        return 0.0
    mlp_b = p.mlp_dgrad + (0.0 if delay_wgrad else p.mlp_wgrad)
    pre_b = p.pre_dgrad + (0.0 if delay_wgrad else p.pre_wgrad)
    # run()'s issue order: (stream, chain, seconds); chain "f"/"b": the node waits for its micro-batch's
    # previous node; None: a delayed weight gradient, only queued behind its stream's kernels
    one = [("comm", "b", p.a2a), ("comp", "f", p.pre_fwd), ("comp", "b", mlp_b), ("comm", "f", p.a2a)]
    one += [("comp", None, p.mlp_wgrad)] if delay_wgrad else []
    one += [("comm", "b", p.a2a), ("comp", "f", p.mlp_fwd), ("comm", "f", p.a2a), ("comp", "b", pre_b)]
    one += [("comp", None, p.pre_wgrad)] if delay_wgrad else []
    return _two_streams(one * layers, max(0.0, min(comm_sm_share, 0.95)))


def _two_streams(ops: list[tuple[str, str | None, float]], share: float) -> float:
    """Makespan of `ops` (in issue order) on a compute and a communication stream, each running its
    kernels in order, a kernel starting once its stream is free and the previous kernel of its chain
    has finished; compute runs at rate 1 - share while a communication kernel runs."""
    queues: dict[str, list[int]] = {"comp": [], "comm": []}
    pred: list[int | None] = []
    last: dict[str, int] = {}
    for i, (stream, chain, _) in enumerate(ops):
        queues[stream].append(i)
        pred.append(last.get(chain) if chain else None)
        if chain:
            last[chain] = i
    done = [False] * len(ops)
    left = [d for _, _, d in ops]
    head = {"comp": 0, "comm": 0}
    running: dict[str, int | None] = {"comp": None, "comm": None}
    t = 0.0
    while True:
        for stream in ("comm", "comp"):
            q = queues[stream]
            while running[stream] is None and head[stream] < len(q):
                i = q[head[stream]]
                if pred[i] is not None and not done[pred[i]]:
                    break
                head[stream] += 1
                if left[i] <= 0.0:  # an empty kernel finishes at once
                    done[i] = True
                    continue
                running[stream] = i
        if running["comp"] is None and running["comm"] is None:
            return t
        rate = {"comm": 1.0, "comp": 1.0 - share if running["comm"] is not None else 1.0}
        step = min(left[i] / rate[s] for s, i in running.items() if i is not None)
        t += step
        for s, i in running.items():
            if i is not None:
                left[i] -= step * rate[s]
                if left[i] <= 1e-15 * max(1.0, t):
                    done[i], running[s] = True, None


def unpaired_share(microbatches: int, pp: int, vpp: int) -> float:
    """Share of a rank's forward (and backward) chunk passes that run alone, outside the paired 1F1B steps.
    No pipeline (combined_1f1b_schedule_for_no_pipelining): the first forward and the last backward, 1/m.
    Interleaved pipeline (schedules.py get_pp_rank_microbatches @d98e8a64): the warmup forwards and as many
    cooldown backwards, (pp - r - 1) x 2 + (vpp - 1) x pp + 1 (the overlap's extra micro-batch) of m x vpp
    chunk passes; rank 0's count, the largest, since the step waits for the rank that pairs least."""
    if microbatches <= 0:
        return 1.0
    if pp <= 1:
        return 1.0 / microbatches
    warmup = (pp - 1) * 2 + (vpp - 1) * pp + 1
    return min(1.0, warmup / (microbatches * vpp))


def exposed_a2a_per_layer_s(p: LayerPieces, layers: int, unpaired: float, delay_wgrad: bool = True,
                            comm_sm_share: float = 0.0) -> float:
    """All-to-all seconds one MoE layer still shows per micro-batch (forward + backward) under the
    overlap: the paired passes show what their pairs add over the computation, the `unpaired` share
    (unpaired_share) their four all-to-alls."""
    if layers <= 0 or unpaired >= 1.0:
        return 4 * p.a2a
    compute = p.pre_fwd + p.mlp_fwd + p.pre_dgrad + p.pre_wgrad + p.mlp_dgrad + p.mlp_wgrad
    paired = max(0.0, paired_layers_s(p, layers, delay_wgrad, comm_sm_share) / layers - compute)
    return (1.0 - unpaired) * paired + unpaired * 4 * p.a2a


def overlapped_ep_s(lt, slow: float, tp_f: float, tp_b: float, cp_f: float, cp_b: float, ep_fwd_s: float,
                    layers: int, unpaired: float, delay_wgrad: bool, comm_sm_share: float = 0.0) -> float:
    """Exposed all-to-all seconds (forward + backward) of one MoE layer per micro-batch under the
    overlap, from its LayerTime (plan/compute.py; `slow`: compute slowed by SMs lent to communication),
    its exposed TP and CP communication (part of the nodes they run in) and `ep_fwd_s`, the layer's
    dispatch + combine forward. The routed experts' backward is their forward twice over, half data
    and half weight gradient (two GEMMs per forward GEMM); the attention side's weight gradient is its
    forward less the attention core (which has none); the rest of the backward is its data gradient."""
    mlp = lt.experts_fwd_s * slow
    pre_fwd = lt.fwd_s * slow - mlp + tp_f + cp_f
    pre_bwd = (lt.bwd_s + lt.recompute_s) * slow + tp_b + cp_b - 2 * mlp
    pre_wgrad = max(0.0, (lt.fwd_s - lt.attn_fwd_s) * slow - mlp)
    pieces = LayerPieces(pre_fwd=pre_fwd, mlp_fwd=mlp, pre_dgrad=max(0.0, pre_bwd - pre_wgrad), pre_wgrad=pre_wgrad,
                         mlp_dgrad=mlp, mlp_wgrad=mlp, a2a=ep_fwd_s / 2)
    return exposed_a2a_per_layer_s(pieces, layers, unpaired, delay_wgrad, comm_sm_share)


DEEPEP_DEFAULT_SMS = 20  # Megatron-Core TransformerConfig.moe_deepep_num_sms, "historical default 20" (@d98e8a64)


def dispatcher_sms(opts) -> int:
    """SMs the EP dispatch/combine kernels run on: Options.moe_dispatcher_sms, else DeepEP's default for the
    flex backends (HybridEP "uses the default from DeepEP"), else 0 (NCCL's all-to-all: its CTAs are not
    modelled)."""
    if opts.moe_dispatcher_sms is not None:
        return opts.moe_dispatcher_sms
    return DEEPEP_DEFAULT_SMS if opts.moe_flex_backend else 0


def dispatcher_sm_share(opts, gpu_sms: int | None) -> float:
    """Fraction of the GPU's SMs the EP dispatch/combine kernels hold while they run (dispatcher_sms); 0 where
    the catalog gives no SM count."""
    return min(0.95, dispatcher_sms(opts) / gpu_sms) if gpu_sms else 0.0


def overlap_refusal(lay) -> tuple[str, str] | None:
    """(reason key, what Megatron-Core needs) where it refuses the overlap for layout `lay`, else None:
    TransformerConfig.__post_init__ (@d98e8a64) asserts expert parallelism, no full recompute, and the
    interleaved schedule when there is a pipeline."""
    if lay.ep <= 1:
        return "a2a_overlap_needs_ep", "a layout with ep > 1 (the overlap needs expert parallelism)"
    if lay.recompute == "full":
        return "a2a_overlap_refuses_full_recompute", "a layout without recompute=full (Megatron-Core refuses the pair)"
    if lay.pp > 1 and lay.vpp == 1:
        return "a2a_overlap_needs_vpp_with_pp", "vpp > 1 when pp > 1 (the overlap needs the interleaved schedule)"
    return None
