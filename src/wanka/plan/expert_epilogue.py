"""Memory-bound kernels around the routed experts' grouped GEMMs that a plain SwiGLU expert lacks:
gpt-oss's expert biases and clamped GLU inputs, as Megatron-Core's TEGroupedMLP runs them
(megatron/core/transformer/moe/experts.py and fusions/fused_bias_geglu.py, identical at
core_v0.15.0 .. core_v0.19.0, the Megatron-Core of NeMo 25.11 .. 26.08). docs/plan.md
"Expert bias and clamped GLU (gpt-oss)".

- fc1 bias: TEGroupedLinear built with skip_bias_add=False, so Transformer Engine adds it inside the
  grouped GEMM (GEMM epilogue): not priced here (its backward bias-gradient reduction neither).
- fc2 bias: skip_bias_add=True; TEGroupedMLP._apply_bias adds it outside the GEMM in eager PyTorch,
  one expert at a time: torch.cat([t + b * p for each local expert]).to(bf16), where t is the
  expert's bf16 output rows (n x h), b its bf16 bias (h) and p the fp32 router probabilities (n x 1).
  Type promotion makes b * p and t + b * p fp32. Bytes per routed token row (h = hidden):
    forward   b*p: write 4h; t + .: read 2h + 4h, write 4h; cat: read 4h, write 4h;
              .to(bf16): read 4h, write 2h                                    = 28 h
    backward  .to backward (bf16 -> fp32 gradient): read 2h, write 4h; t's gradient cast to bf16:
              read 4h, write 2h; b's gradient sum_n(g * p): multiply read 4h, write 4h, reduce read
              4h; p's gradient sum_h(g * b) (router probabilities require grad): the same 12h = 36 h
  kernels: forward 2 per local expert (multiply, add) + cat + cast; backward 5 per local expert
  (gradient cast, two multiply + reduce pairs) + the cast.
- clamp (activation_func_clamp_value): weighted_bias_quick_geglu_impl clamps the two halves of the
  fc1 output before its fused activation, unfused: x_glu.clamp, x_linear.clamp (each read f, write
  f at 2 bytes), torch.cat of the halves (read 2f, write 2f) = 16 f bytes per routed token forward;
  backward: the two clamp backwards (read gradient and input, write gradient: 6f each) and chunk's
  backward concatenating the halves' gradients (read 4f, write 4f) = 20 f. Kernels: 3 forward,
  3 backward per layer (over all local experts at once).
"""

from __future__ import annotations

from wanka.workload.spec import ModelSpec

BIAS_FWD_BYTES_PER_H = 28
BIAS_BWD_BYTES_PER_H = 36
BIAS_KERNELS_FWD_PER_EXPERT, BIAS_KERNELS_FWD_FIXED = 2, 2
BIAS_KERNELS_BWD_PER_EXPERT, BIAS_KERNELS_BWD_FIXED = 5, 1
CLAMP_FWD_BYTES_PER_F = 16
CLAMP_BWD_BYTES_PER_F = 20
CLAMP_KERNELS = 3


def expert_epilogue(m: ModelSpec, local_experts: float) -> tuple[float, float, float, float]:
    """(forward bytes, backward bytes) per routed token row and (forward, backward) kernel count per
    MoE layer on one GPU; zeros for experts without bias or clamp."""
    if m.moe is None:
        return 0.0, 0.0, 0.0, 0.0
    fwd = bwd = k_fwd = k_bwd = 0.0
    if m.moe.expert_bias:
        fwd += BIAS_FWD_BYTES_PER_H * m.hidden
        bwd += BIAS_BWD_BYTES_PER_H * m.hidden
        k_fwd += BIAS_KERNELS_FWD_PER_EXPERT * local_experts + BIAS_KERNELS_FWD_FIXED
        k_bwd += BIAS_KERNELS_BWD_PER_EXPERT * local_experts + BIAS_KERNELS_BWD_FIXED
    if m.moe.activation_clamp is not None:
        fwd += CLAMP_FWD_BYTES_PER_F * m.moe.ffn_hidden
        bwd += CLAMP_BWD_BYTES_PER_F * m.moe.ffn_hidden
        k_fwd += CLAMP_KERNELS
        k_bwd += CLAMP_KERNELS
    return fwd, bwd, k_fwd, k_bwd


def clamp_fwd_bytes(m: ModelSpec) -> float:
    """The clamp's forward bytes per routed token row: rerun with the activation when recompute
    module moe_act checkpoints TEGroupedMLP's bias_act_func (which contains the clamp)."""
    if m.moe is None or m.moe.activation_clamp is None:
        return 0.0
    return CLAMP_FWD_BYTES_PER_F * m.moe.ffn_hidden
