"""Jobs and the decisions the scheduler hands back (docs/sched.md "Jobs").

A `Job` is what a user submits: a gang of GPUs (or an elastic range), a priority, a tenant, a
topology request and a checkpoint interval. `duration_s` is the job's work, in seconds of running
at `gpus` GPUs on its best (minimal-spread) placement; None when the caller (the digital twin)
decides itself when the job ends and calls `Scheduler.finish`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wanka.errors import SpecError

TOPOLOGIES = ("best-effort", "scale-up", "leaf", "spine")


@dataclass(frozen=True)
class Job:
    id: str
    gpus: int
    submit_s: float
    duration_s: float | None = None
    priority: int = 0
    tenant: str = "default"
    min_gpus: int | None = None
    max_gpus: int | None = None
    topology: str = "best-effort"  # best-effort | scale-up | leaf | spine (all GPUs inside one such unit)
    checkpoint_interval_s: float | None = None
    preemptible: bool = True

    def __post_init__(self) -> None:
        where = f"job {self.id!r}"
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus < 1:
            raise SpecError(f"{where}.gpus", "an integer >= 1", self.gpus)
        _finite(where, "submit_s", self.submit_s, allow_none=False)
        _finite(where, "duration_s", self.duration_s, allow_none=True)
        _finite(where, "checkpoint_interval_s", self.checkpoint_interval_s, allow_none=True, positive=True)
        if self.topology not in TOPOLOGIES:
            raise SpecError(f"{where}.topology", " | ".join(TOPOLOGIES), self.topology)
        lo = self.gpus if self.min_gpus is None else self.min_gpus
        hi = self.gpus if self.max_gpus is None else self.max_gpus
        object.__setattr__(self, "_range", (lo, hi))  # cached: read on every scheduling pass
        if not (1 <= lo <= self.gpus <= hi):
            raise SpecError(f"{where}.min_gpus/max_gpus", f"1 <= min_gpus <= gpus ({self.gpus}) <= max_gpus", (lo, hi))

    @property
    def min_gpus_(self) -> int:
        return self._range[0]

    @property
    def max_gpus_(self) -> int:
        return self._range[1]

    @property
    def elastic(self) -> bool:
        return self._range[0] < self._range[1]


def _finite(where: str, name: str, value, *, allow_none: bool, positive: bool = False) -> None:
    if value is None and allow_none:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise SpecError(f"{where}.{name}", "a finite number > 0" if positive else "a finite number >= 0", value)


@dataclass(frozen=True)
class Start:
    job_id: str
    gpu_ids: tuple[int, ...]
    speed_factor: float


@dataclass(frozen=True)
class Preempt:
    job_id: str


@dataclass(frozen=True)
class Resize:
    job_id: str
    gpu_ids: tuple[int, ...]
    speed_factor: float


Decision = Start | Preempt | Resize
