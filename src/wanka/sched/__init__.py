"""Topology-aware gang scheduler (docs/sched.md): a clock-free state machine plus a trace replay.

    from wanka.sched import Job, Scheduler
    s = Scheduler(cluster, policy="topo-bestfit", queue="fifo", backfill=True)
    s.submit(Job("a", gpus=16, submit_s=0, duration_s=3600), 0.0)
    for d in s.schedule(0.0): ...   # Start | Preempt | Resize
"""

from wanka.sched.job import Decision, Job, Preempt, Resize, Start
from wanka.sched.scheduler import QUEUES, Scheduler
from wanka.sched.placement import PLACEMENTS

__all__ = ["Job", "Scheduler", "Start", "Preempt", "Resize", "Decision", "QUEUES", "PLACEMENTS"]
