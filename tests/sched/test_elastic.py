"""Elastic jobs start at whatever fits between min and max, shrink for a waiting gang, grow on idle GPUs."""

import pytest

from wanka.sched import Job, Resize, Scheduler, Start


def test_elastic_start_shrink_and_grow(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("e", gpus=32, min_gpus=16, max_gpus=64, submit_s=0, duration_s=6400), 0)
    (start,) = s.schedule(0)
    assert isinstance(start, Start) and len(start.gpu_ids) == 64  # all idle GPUs, up to max
    assert s.expected_end_s("e") == pytest.approx(3200, rel=0.02)  # twice the nominal GPUs: half the time
    s.submit(Job("g", gpus=32, submit_s=100, duration_s=50), 100)
    decisions = s.schedule(100)
    assert isinstance(decisions[0], Resize) and len(decisions[0].gpu_ids) == 32
    assert decisions[1].job_id == "g"
    e = s.job_state("e")
    assert e.lost_work_s == 0 and e.saved_work_s == pytest.approx(200, rel=0.02)  # planned resize: no loss
    s.finish("g", 150)
    (grow,) = s.schedule(150)
    assert isinstance(grow, Resize) and len(grow.gpu_ids) == 64


def test_elastic_never_below_min(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("e", gpus=48, min_gpus=40, submit_s=0, duration_s=100), 0)
    s.schedule(0)
    s.submit(Job("g", gpus=32, submit_s=1, duration_s=10), 1)
    assert s.schedule(1) == []  # shrinking to 40 frees only 24
    assert s.job_state("e").gpus_held == 48
