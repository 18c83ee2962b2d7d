"""Context parallelism as PyTorch's experimental `context_parallel` runs it (torchtitan), with the
"allgather" rotate method (docs/plan.md "Estimator", context parallelism).

Source: torch/distributed/tensor/experimental/_attention.py at the torch commit torchtitan's
2024-12 benchmarks name (1963fc8, 2024-12-23; the same algorithm as torch 2.13's
_context_parallel/_attention.py), and torchtitan@9dec370ad26b, whose
`--experimental.context_parallel_rotate_method` defaults to "allgather" (config_manager.py) and
is passed to `set_rotate_method` (utils.py create_context_parallel_ctx).

Forward (`_templated_ring_attention`): the first exchange_buffers call all-gathers the local K
and V of every CP rank in one `all_gather_tensor` (_AllGatherRotater); step 0 computes the
local causal block, and step 1 waits for the gather: only the step-0 block hides it. With the
round-robin load balance (`_cp_options.enable_load_balance`, a default of True since pytorch PR
#132442, 2024, confirmed in issue #141429; context_parallel() hands rank r chunks r and 2cp-1-r;
torchtitan sets no other CP option) every step computes the same number of query-key pairs, so
step 0 is 1/cp of the layer's attention forward (docs/plan.md "torchtitan's CP rows, follow-up").

Backward (`_templated_ring_attention_backward`): K and V are all-gathered again (kv_rotater, the
same method), hidden by the step-0 backward block only; the dK/dV accumulators are fp32
(`convert_to_f32`) and move one hop per step with `permute_tensor` (dkv_rotater is always
ALL_TO_ALL): each step's wait follows one step's backward block, and the wait after the loop has
nothing to hide under. Full activation recompute replays the forward, its all-gather included.

K and V carry the query head count when the model expands them before SDPA (torchtitan
models/llama/model.py repeat_kv, Options.gqa_repeat_kv): the exchanged bytes are heads/kv_heads
times the GQA size. The fp32 output/LSE merges are elementwise work that torch.compile fuses
(compute.py prices one read-modify-write per step); not repeated here.
"""

from __future__ import annotations

FP32_GRAD_BYTES = 4  # _cp_options.convert_to_f32: dK/dV accumulated and sent in fp32


def allgather_cp_exposed_s(cluster, lay, kv_bytes: float, attn_fwd_s: float, full_recompute: bool,
                           algorithm: str) -> tuple[float, float]:
    """(forward, backward) exposed CP communication of one layer and one micro-batch.

    kv_bytes: this rank's K and V (16-bit) for the micro-batch; attn_fwd_s: the layer's attention
    forward on this rank (all cp steps); backward blocks take 2.5x their forward (compute.py)."""
    from wanka.plan.exposure import _ct

    cp = lay.cp
    if cp <= 1:
        return 0.0, 0.0
    size, stride = lay.group("cp")
    gather = _ct(cluster, "all_gather", cp * kv_bytes, size, stride, algorithm)  # nbytes: the output
    # permute_tensor to rank+1: the ring's farthest hop spans half the group (as exposure.py's ring)
    dkv = _ct(cluster, "send_recv", kv_bytes * FP32_GRAD_BYTES / 2, 2, stride * max(1, cp // 2), algorithm)
    step_fwd = attn_fwd_s / cp
    step_bwd = 2.5 * step_fwd
    fwd = max(0.0, gather - step_fwd)
    bwd = max(0.0, gather - step_bwd) + (cp - 1) * max(0.0, dkv - step_bwd) + dkv
    if full_recompute:
        bwd += fwd
    return fwd, bwd


def exposed_allgather_cp_s(cluster, lay, kv_bytes: float, algorithm: str) -> tuple[float, float]:
    """(forward, backward) CP communication of one layer and one micro-batch when nothing hides it
    (Llama 3, arXiv 2407.21783 s.3.3.2): the whole K,V all-gathered before the local queries'
    attention, dK,dV reduce-scattered after the backward."""
    from wanka.plan.exposure import _ct

    if lay.cp <= 1:
        return 0.0, 0.0
    size, stride = lay.group("cp")
    gathered = kv_bytes * lay.cp  # all_gather's output, reduce_scatter's input (exposure._ct nbytes)
    return (_ct(cluster, "all_gather", gathered, size, stride, algorithm),
            _ct(cluster, "reduce_scatter", gathered, size, stride, algorithm))
