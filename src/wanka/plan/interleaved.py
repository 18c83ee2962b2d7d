"""What Megatron-Core's interleaved pipeline schedule (vpp > 1 model chunks per stage) hides.

Two mechanisms of `forward_backward_pipelining_with_interleaving`
(megatron/core/pipeline_parallel/schedules.py), each a closed form or a few-line queue:

  pipeline transfers (Options.pp_p2p_overlap; ModelParallelConfig.overlap_p2p_comm, False by default in
      Megatron-Core, on by default in Megatron-LM's arguments since 2023-10 (--no-overlap-p2p-communication,
      plan/frameworks.py) and in NVIDIA's MLPerf NeMo configs: conf/custom.yaml `overlap_p2p_comm: ${...OVERLAP_P2P_COMM,True}`,
      training_results_v4.0 gpt3/implementations/nemo/conf/megatron_gpt_config_custom.yaml, v5.0/v5.1
      llama31_*): the send/recv of a chunk's activation (gradient) is posted with isend/irecv before
      the next chunk's forward (backward) runs and waited for after it, so per chunk and direction
      only max(0, transfer - chunk compute) is on the critical path -- in the 1F1B body: "the PP
      communications in pipeline fill and flush are still exposed" (NeMo docs, features/
      optimizations/communication_overlap.rst), so the bubble keeps them (plan/estimate.py).
      Without it (or with vpp = 1, where the option does not apply) each transfer is serialised
      with the compute.

  data-parallel sync per chunk (Options.dp_sync_per_chunk), as Megatron-LM runs it at core_r0.8.0
      (the version of its README's H100 scaling table), read in megatron/training/training.py,
      pipeline_parallel/schedules.py, optimizer/distrib_optimizer.py @baf94af3c6:
      reduce-scatter: with --overlap-grad-reduce and --delay-grad-reduce (on by default:
      `--no-delay-grad-reduce` is the opt-out) training.py sets config.grad_sync_func[chunk] =
      start_grad_sync, and backward_step_helper launches chunk c's reduction (all its buckets at
      once) after the backward of micro-batch `last_of_chunk_c + pipeline rank` -- "we launch
      asynchronous communication at the same time across the pipeline-parallel group", i.e. when the
      first stage ends chunk c's last backward; chunk 0's is launched after the loop ("Launch any
      remaining grad reductions"). In the cooldown the stage runs the last pp micro-batches of chunk
      vpp-1, then of vpp-2, ...: chunk c's reduction (1/vpp of the stage's gradients) has c * pp
      chunk-backwards left to run under, queued behind the earlier chunks' on the one DP
      communicator; chunk 0's is exposed whole.
      all-gather: --overlap-param-gather without --delay-param-gather (its default, so
      config.param_sync_func stays None): DistributedOptimizer.zero_grad() dispatches the first
      bucket's all-gather at the start of the step and each forward pre-hook waits for its bucket and
      dispatches the next one (one in flight: "we run with CUDA_DEVICE_MAX_CONNECTIONS=1"), in
      model-chunk order. Chunk 0 is the one-window bucket chain (dp_schedule.bucketed_exposed_s);
      chunk c > 0's first bucket is dispatched when chunk c-1's last bucket is reached and has the
      rest of chunk c-1's first pp forwards to arrive in, its other buckets chain under chunk c's
      own first forward. With vpp = 1 both reduce to the one-window forms of wanka.plan.dp_schedule.
      The cooldown's idle slots (bubble) would hide more: not counted (a lower bound on what is
      hidden).
"""

from __future__ import annotations


def chunk_p2p_exposed_s(p2p_s: float, vpp: int, fwd_s: float, bwd_s: float) -> float:
    """Exposed pipeline transfers of one micro-batch on a stage (all its chunks, both directions)
    with overlap_p2p_comm; `fwd_s`, `bwd_s`: the stage's forward/backward of one micro-batch."""
    return vpp * (max(0.0, p2p_s - fwd_s / vpp) + max(0.0, p2p_s - bwd_s / vpp))


def fill_flush_p2p_s(p2p_s: float, vpp: int, pp: int) -> float:
    """Transfers on the critical path of the fill and flush with overlap_p2p_comm (one step): every
    hop of the first micro-batch's forward chain through all vpp * pp chunk-stages and of the last
    one's backward chain, 2 (vpp pp - 1) transfers -- not the 2 (pp - 1) of the non-interleaved
    pipeline. Megatron-Core's warmup (schedules.py: chunk id (k mod pp vpp) // pp, warmup
    2 (pp - rank - 1) + (vpp - 1) pp forwards) makes stage 0 wait at each chunk boundary for micro-
    batch 0 to come round the ring; in the 1F1B body a transfer shorter than the chunk it hides under
    costs nothing. Exact against an event simulation of that order (tests/plan/test_plan_interleaved_fill.py)
    while a transfer is no longer than a chunk's forward; with vpp = 1 it is 2 (pp - 1) transfers."""
    return 2 * (vpp * pp - 1) * p2p_s


def chunk_grad_exposed_s(grad_s: float, vpp: int, pp: int, bwd_s: float) -> float:
    """Reduce-scatter time past the end of the last backward when each chunk's (grad_s / vpp) is
    launched as the chunk's last backward ends (delay_grad_reduce) and queues behind the others;
    chunk vpp-1 ends first. With vpp = 1: max(0, RS - bwd), the stage's last backward hiding it."""
    if vpp == 1:
        return max(0.0, grad_s - bwd_s)
    r, b = grad_s / vpp, bwd_s / vpp
    finish = float("-inf")
    for chunk in reversed(range(vpp)):
        launch = -chunk * pp * b  # 0 = end of the stage's last backward
        finish = max(finish, launch) + r
    return max(0.0, finish)


def chunk_param_exposed_s(param_s: float, vpp: int, pp: int, fwd_s: float, bucket_s: float = 0.0,
                          aligned: bool = False) -> float:
    """Delay of the first forwards from the all-gather of the updated parameters, chunk by chunk.

    aligned (core_r0.9+ --align-param-gather, on by default; r0.8's opt-in --delay-param-gather):
    chunk k+1's gather (param_s / vpp) is launched as chunk k's first forward starts and must be in
    by the end of chunk k+1's first forward; chunk 0's is launched at the step's start.
    Not aligned (r0.8's default): bucket by bucket in model-chunk order, one bucket in flight, each
    next one dispatched when the forward reaches the previous one (`bucket_s` one bucket's gather;
    0: each chunk one gather): chunk 0 waits for its chain under its first forward; chunk c > 0's
    first bucket arrives during chunk c-1's pp first forwards, the rest chain under its own."""
    from wanka.plan.dp_schedule import bucketed_exposed_s

    a, f = param_s / vpp, fwd_s / vpp
    if aligned:
        delay, finish = 0.0, 0.0
        for k in range(vpp):
            launch = 0.0 if k == 0 else (k - 1) * pp * f + delay
            finish = max(finish, launch) + a
            due = k * pp * f + f + delay
            delay += max(0.0, finish - due)
        return delay
    if vpp == 1:
        return bucketed_exposed_s(a, bucket_s, f)
    first = min(bucket_s, a) if bucket_s > 0.0 else a  # the bucket fetched ahead
    later = bucketed_exposed_s(a, first, f) - first if bucket_s > 0.0 else 0.0  # the chain after it
    return bucketed_exposed_s(a, min(bucket_s, a), f) + (vpp - 1) * (max(0.0, first - pp * f) + later)
