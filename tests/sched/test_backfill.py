"""EASY backfill: later jobs start early only if they do not delay the head's reservation."""

from wanka.sched import Job, Scheduler


def setup(backfill=True):
    s = Scheduler(__import__("wanka.cluster", fromlist=["x"]).load_cluster("tests/sched/data/tiny4.yaml"),
                  backfill=backfill)
    s.submit(Job("run", gpus=48, submit_s=0, duration_s=100), 0)
    s.schedule(0)  # 16 GPUs idle until t=100
    s.submit(Job("head", gpus=32, submit_s=1, duration_s=100), 1)
    return s


def test_short_job_backfills_long_job_waits():
    s = setup()
    s.submit(Job("short", gpus=16, submit_s=2, duration_s=50), 2)  # ends at 52 < 100
    s.submit(Job("long", gpus=8, submit_s=2, duration_s=500), 2)  # would hold GPUs the head needs
    started = [d.job_id for d in s.schedule(2)]
    assert started == ["short"]
    assert s.head == "head"


def test_job_on_spare_gpus_backfills_even_if_long():
    s = setup()
    s.submit(Job("long", gpus=16, submit_s=2, duration_s=500), 2)  # at t=100: 64 free, head needs 32, 32 spare
    assert [d.job_id for d in s.schedule(2)] == ["long"]


def test_no_backfill_is_strict_fifo():
    s = setup(backfill=False)
    s.submit(Job("short", gpus=16, submit_s=2, duration_s=50), 2)
    assert s.schedule(2) == []


def test_unknown_durations_backfill_only_on_spare_gpus():
    """Jobs driven by the twin (duration None) never count as ending before the head's reservation."""
    s = Scheduler(__import__("wanka.cluster", fromlist=["x"]).load_cluster("tests/sched/data/tiny4.yaml"))
    s.submit(Job("run", gpus=48, submit_s=0, duration_s=100), 0)
    s.schedule(0)
    s.submit(Job("head", gpus=32, submit_s=1, duration_s=100), 1)
    s.submit(Job("open", gpus=24, submit_s=2), 2)  # 32 spare at t=100 would hold it, but 16 are free now
    s.submit(Job("open-small", gpus=8, submit_s=2), 2)
    assert [d.job_id for d in s.schedule(2)] == ["open-small"]
    assert s.expected_end_s("open-small") is None
    s.finish("open-small", 50)  # the driver ends it
    assert s.job_state("open-small").status == "done"
