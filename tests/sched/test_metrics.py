"""Replay metrics against hand-computed values on a two-job workload."""

import pytest

from wanka.sched import Job, Scheduler
from wanka.sched.metrics import summarize
from wanka.sched.replay import replay


def test_jct_queue_utilization_by_hand(tiny4):
    jobs = [Job("a", gpus=48, submit_s=0, duration_s=100), Job("b", gpus=32, submit_s=10, duration_s=50)]
    m = summarize(replay(Scheduler(tiny4, backfill=False), jobs))
    # a runs 0-100; b waits for a (only 16 free), runs 100-150
    assert m["mean_jct_s"] == pytest.approx((100 + 140) / 2)
    assert m["mean_queue_s"] == pytest.approx((0 + 90) / 2)
    assert m["makespan_s"] == pytest.approx(150)
    assert m["utilization"] == pytest.approx((48 * 100 + 32 * 50) / (64 * 150))
    assert m["effective_utilization"] == pytest.approx(m["utilization"])  # both at minimal spread
    assert m["minimal_spread_share"] == 1.0 and m["gang_starts"] == 2
    # b waits 10-100 with 16 GPUs free on 4 whole nodes: a 32-GPU gang can use them all
    assert m["fragmentation"] == 0.0 and m["queue_blocked_share"] == pytest.approx(90 / 150)


def test_fragmentation_counts_free_gpus_on_too_small_nodes(tiny4):
    s = Scheduler(tiny4, backfill=False)
    for n in range(16):  # 3 GPUs busy on every node: 16 free, one per node
        s.submit(Job(f"x{n}", gpus=3, submit_s=0, duration_s=100, topology="scale-up"), 0)
    s.schedule(0)
    assert s.free.total_avail == 16
    s.submit(Job("g", gpus=4, submit_s=1, duration_s=10, topology="scale-up"), 1)
    s.schedule(1)
    assert s.head == "g" and s.fragmentation() == (16, 16)  # 16 free, none usable by a 4-GPU node job
