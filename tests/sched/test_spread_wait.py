"""A gang may wait up to spread_wait_s for a minimal-spread placement (Slurm --switches=N@max-wait)."""

from wanka.sched import Job, Scheduler
from wanka.sched.metrics import summarize
from wanka.sched.replay import replay


def one_free_gpu_per_node(tiny4, wait_s):
    s = Scheduler(tiny4, spread_wait_s=wait_s)
    for n in range(16):
        s.submit(Job(f"x{n}", gpus=3, submit_s=0, duration_s=1000, topology="scale-up"), 0)
    s.schedule(0)
    assert s.free.total_avail == 16 and all(s.free.avail == 1)
    s.submit(Job("g", gpus=4, submit_s=1, duration_s=10), 1)
    return s


def test_gang_waits_then_takes_the_freed_whole_node(tiny4):
    s = one_free_gpu_per_node(tiny4, wait_s=100)
    assert s.schedule(1) == [] and s.next_wakeup_s() == 101
    x0 = s.job_state("x0").gpu_ids[0] // 4
    s.finish("x0", 50)
    (start,) = s.schedule(50)
    assert start.job_id == "g" and {i // 4 for i in start.gpu_ids} == {x0}


def test_gang_spreads_when_patience_runs_out(tiny4):
    s = one_free_gpu_per_node(tiny4, wait_s=100)
    assert s.schedule(1) == []
    assert s.schedule(100.5) == []
    (start,) = s.schedule(101)
    assert len({i // 4 for i in start.gpu_ids}) == 4  # one leaf, four nodes


def test_without_wait_the_gang_spreads_at_once(tiny4):
    s = one_free_gpu_per_node(tiny4, wait_s=0)
    (start,) = s.schedule(1)
    assert len({i // 4 for i in start.gpu_ids}) == 4 and s.next_wakeup_s() is None


def test_replay_wakes_up_for_the_deadline(tiny4):
    jobs = [Job(f"x{n}", gpus=3, submit_s=0, duration_s=1000, topology="scale-up") for n in range(16)]
    jobs.append(Job("g", gpus=4, submit_s=1, duration_s=10))
    r = replay(Scheduler(tiny4, spread_wait_s=100), jobs)
    g = r.scheduler.job_state("g")
    assert g.first_start_s == 101 and g.end_s > 111  # spread over 4 nodes: slower than minimal
    assert summarize(r)["finished"] == 17
