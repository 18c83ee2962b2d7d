"""When a training framework reduces gradients and gathers parameters, and what of it is exposed.

The collectives themselves are priced by wanka.plan.exposure.dp_comm; this module applies the
framework's *schedule* (Options.grad_sync, dp_overlap, param_gather_overlap), each a closed form:

  once per step (Options.grad_sync="per_step"; ZeRO-0/1 always; ZeRO-2 in Megatron's distributed
      optimizer and in DeepSpeed's pipeline engine):
      overlapped:   max(0, RS - bwd) + max(0, AG - fwd)
      not:          RS + AG
    Megatron-Core accumulates every micro-batch's gradients into its fp32 main-grad buffer and runs
    the backward of all but the last micro-batch under DDP's no_sync (pipeline_parallel/schedules.py
    `no_sync_func`); with --overlap-grad-reduce the bucketed reduce-scatter (or all-reduce) is issued
    as buckets fill during the *last* micro-batch's backward (distributed/param_and_grad_buffer.py,
    distributed_data_parallel.py), with --overlap-param-gather the all-gather of the updated
    parameters runs under the next step's first forward (optimizer/distrib_optimizer.py). MegaScale
    does the same (NSDI'24 s.3.2). `bwd`/`fwd` are one micro-batch's backward/forward on the slowest
    stage.
  every micro-batch (grad_sync="auto" with zero=2: DeepSpeed ZeRO-2 outside the pipeline engine,
      FSDP SHARD_GRAD_OP / FSDP2 reshard_after_forward=False without no_sync):
      overlapped:   m * max(0, RS - bwd) + max(0, AG - fwd)
      not:          m * RS + AG
    A rank keeps only its gradient shard, so every micro-batch's gradients are reduce-scattered:
    DeepSpeed's engine calls overlapping_partition_gradients_reduce_epilogue() after every backward
    when gradients are partitioned, and only at the accumulation boundary for stage 1
    (runtime/engine.py allreduce_gradients: "ZeRO stage >= 2 communicates during non gradient
    accumulation boundaries as well"); with overlap_comm the bucket reductions run on a side stream
    during that backward and the epilogue waits for them, so the window is that micro-batch's
    backward, not the next micro-batch. FSDP's post-backward callback likewise waits for the
    reduce-scatter stream at the end of each backward.
  param_gather_overlap=False: DeepSpeed ZeRO-1/2 all-gather the updated fp16/bf16 partitions right
    after the optimizer step (runtime/zero/stage_1_and_2.py step(): all_gather_dp_groups), before the
    next forward starts: the all-gather is exposed whatever dp_overlap says.
  SMs lent to the overlapped collectives (Options.dp_comm_ctas): NCCL runs a collective as one
    thread block (CTA) per channel, each holding an SM for the collective's whole duration
    (NCCL_MIN_CTAS / NCCL_MAX_CTAS bound their number, NCCL docs "Environment Variables"); the
    compute it overlaps runs on the remaining SMs, 1/(1 - f) slower with f = ctas / SMs -- the
    mechanism DeepSeek-V3 s.3.2.2 prices for its all-to-all (20 of 132 SMs) and the reason NVIDIA's
    MLPerf configs leave SMs to NCCL (NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=16 with NCCL_MIN_CTAS=16,
    training_results_v5.1 NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_common.sh).
    First order: the overlapped compute is min(RS, bwd) + min(AG, fwd), and costs
    f / (1 - f) of it more. It matters when a step has few micro-batches (the overlapped window is
    one micro-batch's backward and forward): MLPerf's Llama 3.1 8B runs one micro-batch per step.
"""

from __future__ import annotations

from wanka.plan.interleaved import chunk_grad_exposed_s, chunk_param_exposed_s


def exposed_dp_s(dp, lay, fwd_s: float, bwd_s: float, opts) -> float:
    """Exposed data-parallel communication of one step (ZeRO-0/1/2; ZeRO-3 is wanka.plan.zero3).

    `dp`: the step's collectives (exposure.DPComm: grad_s = one reduce-scatter/all-reduce of the
    stage's gradients, param_s = one all-gather; microbatch_rs_s > 0 when they are reduced every
    micro-batch); `fwd_s`, `bwd_s`: one micro-batch's forward and backward on the slowest stage."""
    grad, param = _exposed_parts(dp, lay, fwd_s, bwd_s, opts)
    reduces = dp.per_step_microbatches(lay) if dp.microbatch_rs_s > 0 else 1
    return reduces * grad + param


def _exposed_parts(dp, lay, fwd_s: float, bwd_s: float, opts) -> tuple[float, float]:
    """(exposed gradient reduction, exposed parameter gather) of one reduction each."""
    param_overlap = opts.param_gather_overlapped
    per_chunk = opts.dp_sync_per_chunk and lay.vpp > 1 and lay.pp > 1 and dp.microbatch_rs_s == 0
    if per_chunk:  # interleaved schedule: one window per model chunk (wanka.plan.interleaved)
        param = chunk_param_exposed_s(dp.param_s, lay.vpp, lay.pp, fwd_s, dp.param_bucket_s,
                                      opts.align_param_gather) if param_overlap else dp.param_s
        grad = chunk_grad_exposed_s(dp.grad_s, lay.vpp, lay.pp, bwd_s) if opts.dp_overlap else dp.grad_s
        return grad, param
    param = bucketed_exposed_s(dp.param_s, dp.param_bucket_s, fwd_s) if param_overlap else dp.param_s
    grad = bucketed_exposed_s(dp.grad_s, dp.grad_bucket_s, bwd_s) if opts.dp_overlap else dp.grad_s
    return grad, param


def bucketed_exposed_s(total_s: float, bucket_s: float, window_s: float) -> float:
    """Exposed part of `total_s` of collectives, one per bucket (`bucket_s` each), overlapped with a
    `window_s` of compute that fills (reduce-scatter) or consumes (all-gather) the buckets evenly.
    Reduce-scatter: bucket i's gradients are all in at (i + 1)/k of the backward and its collective
    queues behind the earlier ones; the last one starts when the backward ends, so at least one
    bucket is exposed: max(b, T - W (1 - 1/k)), k = T/b. All-gather (Megatron-Core's forward
    pre-hook waits for a bucket and dispatches the next, distributed_data_parallel.py): the first
    bucket is waited for before any compute, each next one under the previous bucket's layers --
    the same form. bucket_s 0: the unbucketed max(0, T - W)."""
    if bucket_s <= 0.0 or total_s <= 0.0:
        return max(0.0, total_s - window_s)
    return max(bucket_s, total_s - window_s * (1.0 - bucket_s / total_s))


def overlap_sm_cost_s(dp, lay, fwd_s: float, bwd_s: float, opts, sms: int | None) -> float:
    """Compute slowed by the SMs the overlapped DP collectives occupy (module docstring); 0 when
    nothing overlaps, the CTA count is not modelled (Options.dp_comm_ctas 0) or the GPU's SM
    count is not in the catalog."""
    if not opts.dp_comm_ctas or not sms or not opts.dp_overlap or dp.microbatch_rs_s > 0:
        return 0.0
    f = min(opts.dp_comm_ctas, sms - 1) / sms
    grad, param = _exposed_parts(dp, lay, fwd_s, bwd_s, opts)
    overlapped = (dp.grad_s - grad) + (dp.param_s - param)  # what ran under compute
    return overlapped * f / (1.0 - f)
