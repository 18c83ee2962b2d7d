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

  data-parallel sync per chunk (Options.dp_sync_per_chunk): Megatron-Core calls grad_sync_func
      [chunk] as soon as a chunk's backward of the last micro-batch is done (is_last_microbatch_
      for_model_chunk) and param_sync_func[chunk + 1] when chunk `chunk` starts its first forward
      (DDP with --overlap-grad-reduce / --overlap-param-gather; NeMo 1 + Apex DistributedFusedAdam
      install the same hooks). In the cooldown the stage runs the last pp micro-batches of chunk
      vpp-1, then of vpp-2, ...: chunk c's last backward ends (vpp-1-c') * pp chunk-backwards before
      the step's end, so its reduce-scatter (1/vpp of the stage's gradients) has that long to run,
      queued behind the earlier chunks' on the one DP stream; likewise each chunk's all-gather runs
      while the previous chunk's first pp forwards do. With vpp = 1 both reduce to the one-window
      forms of wanka.plan.dp_schedule: max(0, RS - bwd), max(0, AG - fwd). The cooldown's idle
      slots (bubble) would hide more: not counted (a lower bound on what is hidden).
"""

from __future__ import annotations


def chunk_p2p_exposed_s(p2p_s: float, vpp: int, fwd_s: float, bwd_s: float) -> float:
    """Exposed pipeline transfers of one micro-batch on a stage (all its chunks, both directions)
    with overlap_p2p_comm; `fwd_s`, `bwd_s`: the stage's forward/backward of one micro-batch."""
    return vpp * (max(0.0, p2p_s - fwd_s / vpp) + max(0.0, p2p_s - bwd_s / vpp))


def chunk_grad_exposed_s(grad_s: float, vpp: int, pp: int, bwd_s: float) -> float:
    """Reduce-scatter time past the end of the last backward when each chunk's (grad_s / vpp) starts
    with that chunk's last backward (bucket by bucket, so during it) and queues behind the others."""
    r, b = grad_s / vpp, bwd_s / vpp
    finish = float("-inf")
    for done in range(vpp):  # chunk vpp-1 finishes first; `done` chunks finished before this one
        end_of_chunk = -(vpp - 1 - done) * pp * b  # 0 = end of the stage's last backward
        finish = max(finish, end_of_chunk - b) + r
    return max(0.0, finish)


def chunk_param_exposed_s(param_s: float, vpp: int, pp: int, fwd_s: float) -> float:
    """Delay of the first forwards when chunk k+1's all-gather (param_s / vpp) is launched as chunk
    k's first forward starts and must be in by the end of chunk k+1's first forward (bucket by
    bucket); chunk 0's is launched at the step's start."""
    a, f = param_s / vpp, fwd_s / vpp
    delay, finish = 0.0, 0.0
    for k in range(vpp):
        launch = 0.0 if k == 0 else (k - 1) * pp * f + delay
        finish = max(finish, launch) + a
        due = k * pp * f + f + delay
        delay += max(0.0, finish - due)
    return delay
