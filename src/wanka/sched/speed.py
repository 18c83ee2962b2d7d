"""Placement-aware speed: how much slower a job runs on the GPUs it got than on its best placement.

A job is modelled as data-parallel training whose step is compute plus one gradient all-reduce,
with no overlap between them (an upper bound on the penalty; DDP overlaps buckets with backward,
Li et al., "PyTorch Distributed", VLDB 2020, section 3.2.3):

    step_s(placement) = compute_s + collective_time(all_reduce, grad_bytes, group_of_gpus(placement))
    speed_factor      = step_s(minimal-spread placement) / step_s(actual placement)   (<= 1)

The all-reduce is priced by the planner's communication model (`wanka.comm`), never here. The job's
size is derived from its GPU count (assumptions, not measurements; override them per Scheduler):
`params_per_gpu` = 1e8 parameters per GPU (so 8 GPUs train 0.8B parameters, 1,024 GPUs 102B),
bf16 gradients (2 bytes per parameter), `tokens_per_gpu_step` = 8,192 and an MFU of 0.40 at the best
placement (Llama 3 reports 38-43 % BF16 MFU on 16k H100, Dubey et al. 2024, Table 4), so

    compute_s = 6 * params * tokens_per_gpu_step / (peak_bf16_FLOPs * mfu)     (6 N FLOPs per token)

Because both compute and gradient bytes grow with `params`, the ratio of the two terms (hence the
speed factor) depends on bandwidth per GPU, peak FLOP/s and tokens per step, not on the model size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wanka import comm


@dataclass
class SpeedModel:
    cluster: object
    params_per_gpu: float = 1e8
    bytes_per_param: float = 2.0
    tokens_per_gpu_step: float = 8192.0
    mfu: float = 0.40
    _cache: dict = field(default_factory=dict, init=False, repr=False)
    _best: dict = field(default_factory=dict, init=False, repr=False)

    def step_s(self, gpus: int, gpu_ids, shape=None) -> float:
        """Seconds per step at this placement; `shape` (placement.shape) caches equal placements."""
        key = (gpus, shape) if shape is not None else None
        if key is None or key not in self._cache:
            group = comm.group_of_gpus(self.cluster, list(gpu_ids))
            key = key if key is not None else (gpus, group)
        if key not in self._cache:
            params = self.params_per_gpu * gpus
            peak = self.cluster.gpu.peak("bf16") * 1e12
            compute = 6 * params * self.tokens_per_gpu_step / (peak * self.mfu)
            ar = comm.collective_time(self.cluster, "all_reduce", params * self.bytes_per_param, group)
            self._cache[key] = compute + ar
        return self._cache[key]

    def factor(self, gpu_ids, best_ids, shape=None) -> float:
        """Speed at `gpu_ids` relative to `best_ids` (the same GPU count at minimal spread)."""
        n = len(gpu_ids)
        if n <= 1:
            return 1.0
        if n not in self._best:
            self._best[n] = self.step_s(n, best_ids)
        return min(1.0, self._best[n] / self.step_s(n, gpu_ids, shape))
