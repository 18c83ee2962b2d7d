"""DeepSpeed's BF16_Optimizer (the BLOOM-era bf16 path, 2022): what it moves per micro-batch and
per step (Options.bf16_optimizer; the megatron-deepspeed profile sets it, docs/plan.md).

DeepSpeed runs every bf16 model under its pipeline engine with BF16_Optimizer (pipe/engine.py
_exec_reduce_grads@56c522386: bf16 with ZeRO stage 1 raises NotImplementedError, so stage 0 and the
optimizer's own ZeRO-1-like sharding; BLOOM's tr11 slurm: "bf16 must use z0! it implements its
own zero stage 1 equivalent"). Read in microsoft/DeepSpeed deepspeed/runtime/bf16_optimizer.py and
pipe/engine.py at 56c522386 ("bf16+pipeline parallelism (#1801)", 2022-04-19):

  per micro-batch: after every backward, `update_hp_grads` adds each bf16 gradient into a full-size
      fp32 buffer: `hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))` -- the cast reads 2 B and
      writes a 4-B temporary, the add reads 4 + 4 and writes 4: 18 B per local parameter of HBM
      traffic, on the stage's critical path (pipe/engine.py _exec_backward_pass calls it right after
      torch.autograd.backward).
  per step: `_bf16_reduce_grads` all-reduces that full fp32 buffer over the data-parallel group
      (`buffered_allreduce_fallback(grads=self.optimizer.get_grads_for_reduction())`, 4 B per
      element, an all-reduce, not a reduce-scatter), and `step()` all-gathers the updated bf16
      partitions (`all_gather_dp_groups`), right after the optimizer, not overlapped.

What the planner adds is the traffic *beyond* its reference: Megatron-LM 2021 accumulated each
micro-batch's 16-bit gradient into a 16-bit main_grad in place (megatron/model/distributed.py
`param.main_grad.add_(param.grad.data)`: read 2 + 2, write 2 = 6 B), and that cost sits inside
the Ampere GEMM efficiency the SC'21 rows anchor (plan/efficiency.py). So a BF16_Optimizer stage
pays 18 - 6 = 12 B per parameter per micro-batch more, at the HBM rate.
"""

from __future__ import annotations

UPDATE_HP_GRADS_BYTES = 18.0  # bf16 read 2, fp32 temporary write 4, add: read 4 + 4, write 4
REFERENCE_ACCUM_BYTES = 6.0  # Megatron-LM 2021 16-bit in-place main_grad add (in the GEMM constant's anchors)
GRAD_ALLREDUCE_BYTES = 4  # the fp32 gradient buffer is what is all-reduced


def applies(opts, lay) -> bool:
    """BF16_Optimizer prices this layout: asked for, bf16 training, stage 0/1 (its own sharding)."""
    return bool(opts.bf16_optimizer) and lay.precision == "bf16" and lay.zero <= 1


def accumulate_s(params_per_gpu: float, hbm_Bps: float) -> float:
    """Extra seconds per micro-batch of update_hp_grads over the reference accumulation."""
    return (UPDATE_HP_GRADS_BYTES - REFERENCE_ACCUM_BYTES) * params_per_gpu / hbm_Bps
