"""Trace replay: a small heap-based event loop that drives the Scheduler (docs/sched.md "Replay").

Events are (time, order, seq): at equal times finishes come before submissions, and seq (the push
order) makes simultaneous events deterministic, as in SimPy's event heap. After every event the
scheduler is asked for decisions; a Start or Resize (re)books the job's finish at the time its
remaining work ends at its rate (speed factor included); a Preempt cancels it (stale finish events
carry an old version and are skipped). When a gang waits for a better placement the scheduler names
a wake-up time (`next_wakeup_s`) and a WAKE event calls it back. Time integrals for the metrics are
taken between events.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from dataclasses import dataclass, field


from wanka.sched.job import Job
from wanka.sched.scheduler import Scheduler

FINISH, SUBMIT, WAKE = 0, 1, 2


@dataclass
class Integrals:
    """Time integrals between the first submission and the last finish."""

    allocated_gpu_s: float = 0.0
    effective_gpu_s: float = 0.0
    queued_s: float = 0.0  # time with a blocked head of queue
    frag_gpu_s: float = 0.0  # free GPUs the head gang cannot use, integrated while it waits
    free_when_queued_gpu_s: float = 0.0
    tenant_gpu_s: Counter = field(default_factory=Counter)


@dataclass
class ReplayResult:
    scheduler: Scheduler
    jobs: list[Job]
    integrals: Integrals
    makespan_s: float
    events: int
    wall_s: float
    cpu_s: float = 0.0  # process CPU time of the loop (robust to a busy shared machine)


def replay(scheduler: Scheduler, jobs: list[Job], *, track_tenants: bool = True) -> ReplayResult:
    s = scheduler
    heap: list[tuple] = []
    for seq, job in enumerate(jobs):
        heap.append((job.submit_s, SUBMIT, seq, job, 0))
    heapq.heapify(heap)
    seq = len(jobs)
    version: dict[str, int] = {}
    wakes: set[float] = set()
    acc = Integrals()
    t_prev = jobs[0].submit_s if jobs else 0.0
    events = 0
    frag = (0, 0)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while heap:
        t, kind, _, item, ver = heapq.heappop(heap)
        dt = t - t_prev
        if dt > 0:
            acc.allocated_gpu_s += s.allocated_gpus * dt
            acc.effective_gpu_s += s.effective_gpus * dt
            if s.head is not None:
                acc.queued_s += dt
                acc.frag_gpu_s += frag[0] * dt
                acc.free_when_queued_gpu_s += frag[1] * dt
            if track_tenants:
                for tenant, used in s.usage.items():
                    if used:
                        acc.tenant_gpu_s[tenant] += used * dt
            t_prev = t
        if kind == SUBMIT:
            s.submit(item, t)
        elif kind == WAKE:
            pass  # only a scheduling pass: a gang's wait for a better placement ended
        else:
            if version.get(item) != ver:
                continue  # the job was preempted or resized after this finish was booked
            s.finish(item, t)
        events += 1
        # drain simultaneous events before asking for decisions (one schedule() per instant)
        if heap and heap[0][0] == t:
            continue
        touched = dict.fromkeys(d.job_id for d in s.schedule(t))  # one job may start, then be preempted
        for jid in touched:
            version[jid] = version.get(jid, 0) + 1
            end = s.expected_end_s(jid) if jid in s.running else None
            if end is not None:
                seq += 1
                heapq.heappush(heap, (end, FINISH, seq, jid, version[jid]))
        wake = s.next_wakeup_s()
        if wake is not None and wake > t and wake not in wakes:
            wakes.add(wake)
            seq += 1
            heapq.heappush(heap, (wake, WAKE, seq, None, 0))
        frag = s.fragmentation() if s.head is not None else (0, 0)
    wall = time.perf_counter() - wall0
    start = jobs[0].submit_s if jobs else 0.0
    return ReplayResult(s, jobs, acc, t_prev - start, events, wall, time.process_time() - cpu0)
