"""Queue orders: fifo by submit time, priority first, shortest GPU-time first."""

import pytest

from wanka.sched import Job, Scheduler


@pytest.mark.parametrize("queue, order", [
    ("fifo", ["a", "b", "c"]),
    ("priority", ["c", "b", "a"]),
    ("sjf", ["b", "c", "a"]),
])
def test_order_of_starts_as_gpus_free_up(tiny4, queue, order):
    s = Scheduler(tiny4, queue=queue, backfill=False, preemption=False)
    s.submit(Job("blocker", gpus=64, submit_s=0, duration_s=10), 0)
    s.schedule(0)
    s.submit(Job("a", gpus=64, submit_s=1, duration_s=100, priority=0), 1)  # 6,400 GPU-s
    s.submit(Job("b", gpus=64, submit_s=2, duration_s=10, priority=1), 2)  # 640 GPU-s
    s.submit(Job("c", gpus=64, submit_s=3, duration_s=20, priority=2), 3)  # 1,280 GPU-s
    assert s.schedule(3) == []
    started, t, running = [], 10.0, "blocker"
    for _ in range(3):
        s.finish(running, t)
        (d,) = s.schedule(t)
        started.append(d.job_id)
        running, t = d.job_id, s.expected_end_s(d.job_id)
    assert started == order
