"""Priority preemption costs the victim exactly the work since its last checkpoint; it resumes from it."""

import pytest

from wanka.sched import Job, Preempt, Scheduler, Start


def test_preempted_job_resumes_from_checkpoint_and_loses_work_since_it(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("low", gpus=64, submit_s=0, duration_s=1000, checkpoint_interval_s=100), 0)
    assert [type(d) for d in s.schedule(0)] == [Start]
    s.submit(Job("high", gpus=32, submit_s=250, duration_s=50, priority=5), 250)
    decisions = s.schedule(250)
    assert decisions[0] == Preempt("low") and decisions[1].job_id == "high"
    low = s.job_state("low")
    assert low.saved_work_s == pytest.approx(200)  # checkpoints at 100 and 200
    assert low.lost_work_s == pytest.approx(50)  # work done 250, saved 200
    s.finish("high", 300)
    (restart,) = s.schedule(300)
    assert restart.job_id == "low"
    assert s.expected_end_s("low") == pytest.approx(300 + 800)  # 800 s of work left


def test_without_checkpoints_the_victim_restarts_from_scratch(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("low", gpus=64, submit_s=0, duration_s=1000), 0)
    s.schedule(0)
    s.submit(Job("high", gpus=4, submit_s=400, duration_s=10, priority=1), 400)
    s.schedule(400)
    assert s.job_state("low").lost_work_s == pytest.approx(400)
    assert s.job_state("low").remaining_work_s() == pytest.approx(1000)


def test_victims_lowest_priority_first_and_never_non_preemptible(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("keep", gpus=32, submit_s=0, duration_s=1000, priority=0, preemptible=False), 0)
    s.submit(Job("mid", gpus=16, submit_s=0, duration_s=1000, priority=2), 0)
    s.submit(Job("low", gpus=16, submit_s=0, duration_s=1000, priority=1), 0)
    assert len(s.schedule(0)) == 3
    s.submit(Job("urgent", gpus=16, submit_s=10, duration_s=10, priority=9), 10)
    decisions = s.schedule(10)
    assert [d for d in decisions if isinstance(d, Preempt)] == [Preempt("low")]
    s.submit(Job("huge", gpus=48, submit_s=11, duration_s=10, priority=9), 11)
    assert [d for d in s.schedule(11) if isinstance(d, Preempt)] == []  # would need "keep": nothing is touched
    assert "mid" in s.running and "keep" in s.running


def test_equal_priority_does_not_preempt(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("a", gpus=64, submit_s=0, duration_s=100), 0)
    s.schedule(0)
    s.submit(Job("b", gpus=4, submit_s=1, duration_s=1), 1)
    assert s.schedule(1) == [] and s.head == "b"
