"""Communication of a training step and the part of it that is exposed (not hidden by compute).

Groups are the ResolvedLayout's (wanka.resolved_layout: Megatron-Core's rank order, tp innermost,
then cp, dp, pp; experts etp, ep, expert_dp, pp). Every collective is priced by
wanka.comm.collective_time on that group.

  TP   Megatron tensor parallelism: per layer 2 all-reduces forward and 2 backward of the layer's
       activations (b*s*h*2 bytes); with sequence parallelism each becomes a reduce-scatter plus an
       all-gather of the same bytes (Korthikanti section 4.2.2); full recompute replays the forward
       ones. Exposed unless the framework overlaps them (Options.tp_overlap: the hidden fraction).
  CP   ring attention: cp-1 exchanges of the local K,V chunk per layer forward, K,V and their
       gradients backward, overlapped with the attention of the chunk in hand (exposed: the excess).
       Options.cp_rotate="allgather-exposed" (Llama 3, arXiv 2407.21783 s.3.3.2): K,V all-gathered before
       the attention and dK,dV reduce-scattered after it, both on the critical path.
  EP   token dispatch and combine all-to-all per MoE layer, forward and backward (b*s*top_k*h bytes
       per rank; FP8 dispatch in fp8 runs unless Options.moe_dispatch_bytes), exposed unless
       Options.ep_overlap.
  PP   one send/recv of b*s*h*2 bytes (/tp with the scatter-gather optimisation or sequence
       parallelism) per micro-batch per model chunk per direction, on the critical path.
  DP   gradient all-reduce (zero 0) or reduce-scatter + parameter all-gather (zero >= 1) once per
       step; hidden behind the backward (resp. the next forward) of one micro-batch when overlapped
       (Megatron --overlap-grad-reduce / --overlap-param-gather). ZeRO-2 keeps only a gradient
       shard, so it reduce-scatters every micro-batch's gradients (DeepSpeed ZeRO-2; FSDP without
       no_sync) unless Options.grad_sync="per_step"; the schedule: wanka.plan.dp_schedule. ZeRO-3
       gathers parameters for the forward, backward (and recompute) of every micro-batch and
       reduce-scatters gradients every micro-batch, one unit (block or weight) ahead of the
       compute: wanka.plan.zero3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from wanka.comm import collective_time, group_for_stride
from wanka.plan import bf16_optimizer as ds_bf16


@dataclass(frozen=True)
class Options:
    """How the training framework runs: mechanisms, not fitted factors (docs/plan.md)."""

    attention: str = "flash"  # flash | flash2 (FlashAttention-2 kernels) | unfused (materialised s x s, pre-2023 Megatron)
    tp_overlap: float = 0.0  # fraction of TP communication hidden under GEMMs (TE userbuffers ~)
    dp_overlap: bool = True  # gradient reduce overlapped with backward, param gather with forward
    ep_overlap: float = 0.0  # fraction of EP all-to-all hidden (DeepSeek DualPipe-style ~1)
    algorithm: str = "auto"  # collective algorithm (comm.ALGORITHMS); "flat-ring": topology-unaware
    grad_bytes: int | None = None  # DP gradient element bytes; None: 2 for fp16, else 4 (fp32 main grads)
    # what recompute=selective recomputes (Megatron-Core --recompute-modules names; DeepSeek-V3 ran
    # ("layernorm", "mla_up_proj", "moe_act"), s.3.2.3 and s.3.3.2); see wanka.workload.activations
    recompute_modules: tuple[str, ...] = ("core_attn",)
    pipeline: str = "1f1b"  # 1f1b (interleaved when vpp > 1) | dualpipe (DeepSeek-V3 s.3.2.1, Table 2)
    # fraction of the GPU's SMs running communication kernels while compute runs (DeepSeek-V3
    # s.3.2.2: 20 of the H800's 132 SMs for the overlapped all-to-all); compute slows by 1/(1-f)
    comm_sm_fraction: float = 0.0
    fp8_activation_cache: bool = True  # FP8 runs cache FP8 GEMM inputs in 1 byte (DeepSeek-V3 s.3.3.2)
    # ZeRO-3 (wanka.plan.zero3): what one gather fetches -- "layer" (FSDP/FSDP2 block) or "weight"
    # (DeepSpeed ZeRO-3's per-submodule fetch); and whether gradient reduce-scatters overlap the
    # backward (DeepSpeed overlap_comm: false by default at stages 1-2, true at stage 3)
    zero3_unit: str = "layer"
    zero3_grad_overlap: bool = True
    # DeepSpeed stage 3 (wanka.plan.zero3): a parameter whose next use is fewer than this many
    # elements away stays gathered (stage3_max_reuse_distance; 0: released after every use), and
    # prefetching waits while this many are gathered (stage3_max_live_parameters; None: no limit)
    zero3_reuse_distance: float = 0.0
    zero3_max_live_params: float | None = None
    # when gradients are reduced (wanka.plan.dp_schedule): "auto" = once per step, except ZeRO-2
    # without pipeline stages every micro-batch (DeepSpeed ZeRO-2, FSDP without no_sync);
    # "per_step" = once per step whatever the stage (Megatron's distributed optimizer)
    grad_sync: str = "auto"
    # the parameter all-gather after the optimizer step hidden under the next forward; None: as
    # dp_overlap (DeepSpeed ZeRO-1/2 gather right after step(): False)
    param_gather_overlap: bool | None = None
    # MoE routing imbalance: max/mean routed tokens per EP rank (wanka.plan.moe_cost); None: the
    # statistical floor of a balanced router (multinomial spread of the micro-batch's tokens)
    moe_imbalance: float | None = None
    # token-dropping MoE: every expert's buffer is padded to capacity_factor x its mean load
    # (Switch Transformer s.2.2; GShard; DeepSpeed-MoE sharded_moe.py dispatches [experts, capacity, h]);
    # replaces the imbalance. None: dropless (Megatron-Core's default)
    moe_capacity_factor: float | None = None
    # bytes per element of the MoE dispatch all-to-all; None: 1 in FP8 runs (DeepSeek-V3 s.3.3: FP8
    # dispatch), else 2. Megatron-Core's all-to-all dispatcher sends the BF16 hidden states: 2
    moe_dispatch_bytes: int | None = None
    # how routed tokens reach the experts (wanka.plan.moe_cost): "alltoall" (Megatron-Core
    # --moe-token-dispatcher-type alltoall, what NeMo recipes set) or "allgather" (the default of that
    # flag up to core_r0.9: the TP(xEP) group's hidden states all-gathered to every rank and permuted
    # there, its collectives not hidden by TP overlap)
    moe_dispatcher: str = "alltoall"
    # the flex dispatcher's backend (--moe-flex-dispatcher-backend deepep|hybridep): an EP group spanning
    # nodes is priced by its hierarchical kernels (wanka.plan.hier_dispatch); None: the flat all-to-all
    moe_flex_backend: str | None = None
    # node-limited routing (--moe-router-num-groups G, --moe-router-group-topk M): each token's experts
    # lie in at most M of G contiguous expert groups (wanka.plan.hier_dispatch); None: no limit
    moe_router_groups: tuple[int, int] | None = None
    # the local experts as one grouped GEMM (--moe-grouped-gemm) or one after another (SequentialMLP,
    # Megatron-Core's default: per-expert kernels and O(experts) gradient copies, wanka.plan.moe_cost)
    moe_grouped_gemm: bool = True
    # Megatron-Core's fused grouped MLP (use_transformer_engine_op_fuser, core_v0.18.0 TEGroupedMLP
    # _fused_forward: TE ops GroupedLinear with bias + ScaledClampedQGeGLU): the expert bias and
    # clamp run inside the fused kernels, so plan/expert_epilogue.py's eager kernels are not priced
    moe_fused_expert_mlp: bool = False
    # Megatron-Core's pipeline_model_parallel_layout (plan/pp_layout.py): which decoder layers, MTP
    # layers and the loss each pipeline rank runs; None: layers split evenly (memory.stage_layers)
    pp_layout: str | None = None
    # multi-token prediction modules (mtp_num_layers), on the last stage unless pp_layout places them
    mtp_layers: int = 0
    # --moe-shared-expert-overlap: the shared experts' GEMMs on a side stream beside the dispatch and
    # combine all-to-alls, which then show only where they outlast them (moe_cost.shared_expert_overlap_ep_s)
    moe_shared_expert_overlap: bool = False
    # Megatron-Core's overlap_moe_expert_parallel_comm (Megatron-Bridge moe_a2a_overlap): one micro-batch's
    # forward beside another's backward, layer by layer on two streams (plan/a2a_overlap.py); and its
    # delay_wgrad_compute (weight gradients off the backward chain, so the dispatch starts after the dgrad)
    moe_a2a_overlap: bool = False
    moe_delay_wgrad: bool = False
    # SMs the flex dispatcher's dispatch/combine kernels hold while they run beside computation (the overlap
    # above): None = the backend's default, DeepEP's 20 (Megatron-Core moe_deepep_num_sms, "historical
    # default 20"; HybridEP "uses the default from DeepEP"), 0 for NCCL's all-to-all (its CTAs not modelled)
    moe_dispatcher_sms: int | None = None
    # a TP collective hides at most under the GEMM it overlaps (exposure.tp_exposed_gemm_bound); False:
    # tp_overlap applies whatever the GEMM lengths
    tp_overlap_gemm_bound: bool = True
    # pipeline sends split over the TP ranks (Megatron's scatter/gather, SC'21 s.4.1); False:
    # DeepSpeed's pipeline engine sends each stage's whole output from every TP rank
    pp_scatter_gather: bool = True
    # pipeline sends and receives one at a time on the compute stream (DeepSpeed runtime/pipe/p2p.py:
    # async_op must be False): a stage pays its send and its receive of each activation and gradient,
    # 4 transfers per micro-batch per chunk; False: Megatron's batched send_forward_recv_backward, 2
    pp_blocking_p2p: bool = False
    # elementwise ops run as separate kernels (PyTorch eager, no torch.compile): torchtitan's RMSNorm,
    # RoPE and SwiGLU op by op (wanka.plan.compute.eager_extra_bytes); False: fused kernels
    eager: bool = False
    # FP8 scaling: "fused" (Transformer Engine: casts fused into norms/activations and the GEMMs) or
    # "torchao-tensorwise" (torchao Float8Linear dynamic tensorwise scaling: separate cast and
    # transpose passes around every GEMM, wanka.plan.compute.fp8_cast_bytes)
    fp8_scaling: str = "fused"
    # FP8 runs keep the parameters themselves in FP8 (Megatron-Core --fp8-param-gather / NeMo
    # fp8_params: Transformer Engine fp8_model_init, the all-gather moves FP8): 1 byte per weight
    # instead of a 16-bit weight plus its FP8 copy (wanka.plan.memory)
    fp8_params: bool = False
    # thread blocks (CTAs, one SM each) the data-parallel collectives occupy while they run under
    # compute (NCCL_MIN_CTAS); the overlapped compute slows by 1/(1 - ctas/SMs) (wanka.plan.dp_schedule).
    # 0: not modelled
    dp_comm_ctas: int = 0
    # interleaved pipeline (vpp > 1) with Megatron-Core's overlap_p2p_comm: each chunk's send/recv is
    # posted (isend/irecv) before the chunk's forward/backward and waited for after it, so a transfer
    # is exposed only past that chunk's compute (wanka.plan.interleaved); False: on the critical path
    pp_p2p_overlap: bool = False
    # parameters per DP bucket (Megatron-Core DistributedDataParallelConfig.bucket_size); None: its
    # default max(40M, 1M x dp x cp) (wanka.plan.exposure.dp_comm)
    dp_bucket_params: float | None = None
    # interleaved pipeline (vpp > 1): the DP reduce-scatter of each model chunk starts when that chunk's
    # last backward ends, the all-gather of each chunk is due by its first forward (Megatron-Core
    # grad_sync_func / param_sync_func per chunk, wanka.plan.dp_schedule); False: one window per step
    dp_sync_per_chunk: bool = False
    # with dp_sync_per_chunk: chunk k+1's parameter all-gather launched as chunk k's first forward
    # starts (Megatron-LM core_r0.9+ --align-param-gather, its default) instead of r0.8's forward
    # pre-hook chain, one bucket in flight (wanka.plan.interleaved.chunk_param_exposed_s)
    align_param_gather: bool = False
    # DeepSpeed's BF16_Optimizer (wanka.plan.bf16_optimizer; bf16 runs at ZeRO stage 0/1 only): every
    # micro-batch's bf16 gradients added into a full fp32 buffer, that buffer all-reduced in fp32
    bf16_optimizer: bool = False
    # seconds per transformer layer per micro-batch that the framework spends beside the kernels priced
    # here (forward, recompute and backward together), on every stage's critical path; 0: none. The
    # megatron-deepspeed profile's value is measured, not explained (plan/frameworks.py _DS_LAYER_OVERHEAD)
    layer_microbatch_overhead_s: float = 0.0
    # how context parallelism exchanges K/V: "ring" (Megatron-Core/Transformer Engine p2p ring, one
    # hop per step under the block in hand), "allgather" (PyTorch's experimental context_parallel
    # with set_rotate_method("allgather"), torchtitan's default) or "allgather-exposed" (Llama 3
    # s.3.3.2: K,V all-gathered before attention, "the all-gather communication latency is exposed
    # in the critical path", dK,dV reduce-scattered after it): wanka.plan.cp_allgather
    cp_rotate: str = "ring"
    # the model expands GQA's K/V to the query head count before attention (torchtitan's Llama
    # repeat_kv): context parallelism exchanges the expanded K/V
    gqa_repeat_kv: bool = False
    # PyTorch FSDP2's per-parameter copies on the compute stream (wanka.plan.zero3.fsdp2_copy_s):
    # the all-gather copy-out into each parameter and the gradient copy-in to the reduce dtype
    fsdp2_copies: bool = False
    # FSDP2 as torchtitan applies it (wanka.plan.zero3.microbatch_exposed_s): the root module and the
    # last block are not resharded after forward, a checkpointed block's replay re-uses its unit's
    # backward gather, and the root's gradients reduce-scatter after the whole backward
    fsdp2_keep_unsharded: bool = False
    # AdamW's foreach implementation (torch.optim _multi_tensor_adam: 8 passes, 80 B/param) instead
    # of a fused kernel (30 B/param; wanka.plan.estimate)
    adam_foreach: bool = False
    # the loss runs eagerly on an fp32 copy of the logits (torchtitan train.py loss_fn:
    # cross_entropy(pred.float()), not compiled): wanka.plan.compute.head_time
    eager_fp32_loss: bool = False
    # Megatron's unfused vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py: fp32 copy,
    # max, in-place subtract, exp, sum, divide; --cross-entropy-loss-fusion is opt-in):
    # wanka.plan.compute.head_time
    megatron_unfused_ce: bool = False
    # the output projection runs in 16 bits in an FP8 run (a plain matmul, not an FP8 linear):
    # wanka.plan.compute.head_time (frameworks.py says which profiles read it from their code)
    bf16_head: bool = False
    # RoPE as a complex multiply (torchtitan's view_as_complex), which torch.compile leaves op by op
    # (wanka.plan.compute.complex_rope_extra_bytes)
    complex_rope: bool = False
    # the framework profile these Options came from (wanka.plan.frameworks); it names the
    # uncertainty class (wanka.plan.uncertainty), never a price
    profile: str | None = None

    @property
    def param_gather_overlapped(self) -> bool:
        """Whether the parameter all-gather hides under the next forward: param_gather_overlap, or dp_overlap
        where it is None."""
        return self.dp_overlap if self.param_gather_overlap is None else self.param_gather_overlap

    def __post_init__(self) -> None:  # invalid Options fail on construction (wanka.plan.options_check)
        from wanka.plan.options_check import check_options

        check_options(self)


@lru_cache(maxsize=200_000)
def _ct(cluster, kind, nbytes, size, stride, algorithm):
    """collective_time on the planner's strided group (memoised: the search asks the same ones)."""
    if size <= 1:
        return 0.0
    return collective_time(cluster, kind, nbytes, group_for_stride(cluster, size, stride), algorithm)


def tp_layer_comm_s(cluster, lay, act_bytes: float, opts: Options) -> float:
    """TP communication of one layer forward (one micro-batch); backward costs the same."""
    if lay.tp <= 1:
        return 0.0
    size, stride = lay.group("tp")
    if lay.sequence_parallel:
        one = (_ct(cluster, "reduce_scatter", act_bytes, size, stride, opts.algorithm)
               + _ct(cluster, "all_gather", act_bytes, size, stride, opts.algorithm))
    else:
        one = _ct(cluster, "all_reduce", act_bytes, size, stride, opts.algorithm)
    return 2 * one * (1 - opts.tp_overlap)


def tp_exposed_gemm_bound(tp_raw_fwd_s: float, tp_overlap: float, gemm_fwd_s: tuple[float, ...]) -> tuple[float, float]:
    """(forward, backward) exposed TP communication of one sequence-parallel dense layer when each of
    its four collectives (equal bytes: raw/4 each) can hide at most under the GEMM it is fused with or runs
    beside: exposed = max(c (1 - tp_overlap), c - GEMM) per collective, the backward GEMMs twice the
    forward's (dgrad + wgrad). An overlap fraction (userbuffers, MC2) assumes each GEMM outlasts its
    collective; this is the same model without that assumption (Options.tp_overlap_gemm_bound)."""
    c = tp_raw_fwd_s / 4
    fwd = sum(max(c * (1 - tp_overlap), c - g) for g in gemm_fwd_s)
    bwd = sum(max(c * (1 - tp_overlap), c - 2 * g) for g in gemm_fwd_s)
    return fwd, bwd


def cp_layer_exposed_s(cluster, lay, kv_chunk_bytes: float, attn_fwd_s: float, opts: Options) -> tuple[float, float]:
    """(forward, backward) exposed ring-attention exchange of one layer."""
    if lay.cp <= 1:
        return 0.0, 0.0
    if opts.cp_rotate != "ring":  # all-gather methods (wanka.plan.cp_allgather)
        from wanka.plan.cp_allgather import allgather_cp_exposed_s, exposed_allgather_cp_s

        if opts.cp_rotate == "allgather-exposed":
            return exposed_allgather_cp_s(cluster, lay, kv_chunk_bytes, opts.algorithm)
        return allgather_cp_exposed_s(cluster, lay, kv_chunk_bytes, attn_fwd_s, lay.recompute == "full", opts.algorithm)
    # a ring over the cp group: its farthest hop spans half the group
    step = _ct(cluster, "send_recv", kv_chunk_bytes, 2, lay.group("cp")[1] * max(1, lay.cp // 2), opts.algorithm)
    per_step_compute = attn_fwd_s / lay.cp
    fwd = (lay.cp - 1) * max(0.0, step - per_step_compute)
    bwd = (lay.cp - 1) * max(0.0, 2 * step - 2.5 * per_step_compute)
    return fwd, bwd


def ep_layer_comm_s(cluster, lay, dispatch_bytes: float, opts: Options) -> float:
    """Dispatch + combine all-to-all of one MoE layer forward; backward costs the same."""
    if lay.ep <= 1:
        return 0.0
    # Megatron-Core's expert ranks: etp (default tp) innermost, then ep, then expert-dp
    size, stride = lay.group("ep")
    one = _ct(cluster, "all_to_all", dispatch_bytes, size, stride, opts.algorithm)
    return 2 * one * (1 - opts.ep_overlap)


def pp_p2p_s(cluster, lay, act_bytes: float, opts: Options) -> float:
    """One activation (or gradient) transfer between neighbouring stages."""
    if lay.pp <= 1:
        return 0.0
    return _ct(cluster, "send_recv", act_bytes, 2, lay.group("pp")[1], opts.algorithm)


@dataclass(frozen=True)
class DPComm:
    grad_s: float  # gradient reduction (all-reduce, or reduce-scatter)
    param_s: float  # parameter all-gather after the optimizer (zero >= 1)
    microbatch_rs_s: float  # > 0: gradients reduce-scattered every micro-batch (ZeRO-2 without a
    # per-step schedule), each this long; ZeRO-3 is priced by wanka.plan.zero3
    # one bucket's reduction / gather (the largest group's): a bucket's collective starts only when
    # all its gradients are in, so the last one runs after the backward (wanka.plan.dp_schedule);
    # 0: not bucketed (the one-window closed forms)
    grad_bucket_s: float = 0.0
    param_bucket_s: float = 0.0

    def per_step_microbatches(self, lay) -> int:
        """Gradient reductions per step (wanka.plan.dp_schedule)."""
        return lay.microbatches if self.microbatch_rs_s > 0 else 1


def dp_comm(cluster, lay, dense_params: float, expert_params: float, opts: Options) -> DPComm:
    """Per-GPU parameter counts of the stage; groups: dp*cp ranks at stride tp for dense
    parameters, dp*cp/ep ranks at stride tp*ep for routed experts.

    Collectives are issued per bucket, each paying its latency: Megatron-Core's DDP bucket is
    max(40M, 1M * dp) parameters (DistributedDataParallelConfig.bucket_size default) unless
    Options.dp_bucket_params says what the run set. ZeRO-3 is priced unit by unit by
    wanka.plan.zero3 (it needs the compute each gather hides under)."""
    size, stride = lay.group("dp_cp")
    e_size, e_stride = lay.group("expert_dp")
    w = 1 if lay.precision == "fp8" else 2
    g = opts.grad_bytes or (2 if lay.precision == "fp16" else 4)

    def coll(kind, bytes_per_param) -> tuple[float, float]:
        """(all buckets, one bucket) of the collective over the dense and the expert groups."""
        total = one = 0.0
        for params, n, st in ((dense_params, size, stride), (expert_params, e_size, e_stride)):
            if params > 0 and n > 1:
                k = max(1, math.ceil(params / (opts.dp_bucket_params or max(40e6, 1e6 * n))))
                t = _ct(cluster, kind, params / k * bytes_per_param, n, st, opts.algorithm)
                total, one = total + k * t, max(one, t)
        return total, one

    if ds_bf16.applies(opts, lay):  # the fp32 buffer all-reduced, bf16 partitions all-gathered
        (ar, ar1), (ag, ag1) = coll("all_reduce", ds_bf16.GRAD_ALLREDUCE_BYTES), coll("all_gather", w)
        return DPComm(ar, ag, 0.0, ar1, ag1)
    if lay.zero == 0:
        (ar, ar1) = coll("all_reduce", g)
        return DPComm(ar, 0.0, 0.0, ar1)
    # with pipeline stages every framework syncs once per step: Megatron (no_sync_func), DeepSpeed's
    # pipeline engine, torch.distributed.pipelining (stage.py backward_maybe_with_nosync: FSDP's
    # set_requires_gradient_sync(last_backward))
    per_step = lay.microbatches <= 1 or lay.pp > 1 or opts.grad_sync == "per_step"
    if lay.zero in (1, 2):
        (rs, rs1), (ag, ag1) = coll("reduce_scatter", g), coll("all_gather", w)
        # zero=2 without a per-step schedule: every micro-batch's gradients (wanka.plan.dp_schedule)
        return DPComm(rs, ag, 0.0 if lay.zero == 1 or per_step else rs, rs1, ag1)
    return DPComm(0.0, 0.0, 0.0)  # ZeRO-3 gathers unit by unit: wanka.plan.zero3
