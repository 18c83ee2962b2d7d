"""What the scheduler remembers about a submitted job: where it runs and how much work is saved.

Work is counted in seconds of running at the job's nominal `gpus` on its best placement, so a job
at k GPUs with speed factor f progresses at rate (k / gpus) * f (linear scaling with GPUs for
elastic jobs: an assumption; Pollux, OSDI'21, measures sublinear goodput). Checkpoints are taken
every `checkpoint_interval_s` of wall-clock time since the job (re)started and at every planned
resize; they cost no time here (the twin prices checkpoint stalls). A stopped job (preempted, or it
lost a node) resumes from its last checkpoint and loses the work since it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from wanka.sched.job import Job


@dataclass
class JobState:
    job: Job
    slot: int
    key: tuple
    status: str = "queued"  # queued | running | done
    gpu_ids: tuple[int, ...] = ()
    nodes: dict[int, int] = field(default_factory=dict)  # node -> GPUs held there
    speed: float = 1.0
    rate: float = 0.0  # work seconds per wall second
    saved_work_s: float = 0.0  # work in the last checkpoint
    seg_start_s: float = 0.0  # wall time the current run segment began (also the checkpoint clock)
    seg_work_s: float = 0.0  # work done when the segment began
    first_start_s: float | None = None
    end_s: float | None = None
    starts: int = 0
    preemptions: int = 0
    lost_work_s: float = 0.0
    borrowing: bool = False
    queued_since_s: float = 0.0  # when it last entered the queue
    end_key: tuple = ()  # its entry in the scheduler's sorted list of expected ends

    @property
    def gpus_held(self) -> int:
        return len(self.gpu_ids)

    def work_done(self, now_s: float) -> float:
        return self.seg_work_s + max(0.0, now_s - self.seg_start_s) * self.rate

    def begin_segment(self, now_s: float, gpu_ids, speed: float, work_s: float) -> None:
        self.gpu_ids = tuple(gpu_ids)
        self.speed = speed
        self.rate = len(self.gpu_ids) / self.job.gpus * speed
        self.seg_start_s, self.seg_work_s = now_s, work_s

    def checkpointed_work(self, now_s: float) -> float:
        """Work in the newest checkpoint at now_s (periodic ones since the segment began)."""
        interval = self.job.checkpoint_interval_s
        if interval is None or self.status != "running":
            return self.saved_work_s
        taken = math.floor(max(0.0, now_s - self.seg_start_s) / interval)
        return max(self.saved_work_s, self.seg_work_s + taken * interval * self.rate)

    def expected_end_s(self) -> float | None:
        """When the running job will finish at its current rate (None: unknown duration)."""
        if self.job.duration_s is None or self.status != "running" or self.rate <= 0:
            return None
        return self.seg_start_s + max(0.0, self.job.duration_s - self.seg_work_s) / self.rate

    def remaining_work_s(self) -> float:
        if self.job.duration_s is None:
            return math.inf
        return max(0.0, self.job.duration_s - self.saved_work_s)
