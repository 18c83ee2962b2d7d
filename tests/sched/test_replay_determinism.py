"""The replay is deterministic for a seed: same seed, same decisions and metrics."""

from wanka.cluster import load_cluster
from wanka.sched import Scheduler
from wanka.sched.metrics import summarize
from wanka.sched.replay import replay
from wanka.sched.synthetic import synthetic_mix


def run(seed: int):
    c = load_cluster("wanka-10k", gpus=2048)
    jobs = synthetic_mix(c.gpus, jobs=300, seed=seed, load=0.9)
    s = Scheduler(c, queue="priority")
    m = summarize(replay(s, jobs))
    m.pop("replay_wall_s"), m.pop("replay_cpu_s")
    ends = [(js.job.id, js.end_s, js.gpu_ids, js.preemptions) for js in s.jobs.values()]
    return m, ends


def test_same_seed_same_result():
    a, b = run(7), run(7)
    assert a == b
    assert a[0]["finished"] == 300


def test_different_seed_different_workload():
    assert run(7)[1] != run(8)[1]
