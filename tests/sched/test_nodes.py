"""Node health: failures stop and requeue the jobs on them, drains keep running jobs, spares are held back."""

import pytest

from wanka.errors import SpecError
from wanka.sched import Job, Scheduler


def test_failure_requeues_job_from_checkpoint(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("a", gpus=8, submit_s=0, duration_s=500, checkpoint_interval_s=60), 0)
    (start,) = s.schedule(0)
    node = start.gpu_ids[0] // 4
    assert s.fail_nodes([node], 130) == ["a"]
    a = s.job_state("a")
    assert a.status == "queued" and a.saved_work_s == pytest.approx(120) and a.lost_work_s == pytest.approx(10)
    (restart,) = s.schedule(130)
    assert all(i // 4 != node for i in restart.gpu_ids)  # never lands on the down node
    assert s.free.total_avail == 64 - 4 - 8


def test_drain_keeps_running_jobs_but_takes_no_new_work(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("a", gpus=2, submit_s=0, duration_s=100), 0)
    (start,) = s.schedule(0)
    node = start.gpu_ids[0] // 4
    s.drain_nodes([node], 1)
    assert "a" in s.running
    s.submit(Job("b", gpus=2, submit_s=2, duration_s=100), 2)
    (b,) = s.schedule(2)
    assert all(i // 4 != node for i in b.gpu_ids)
    s.finish("a", 100)
    assert s.free.total_avail == 64 - 4 - 2  # the drained node's GPUs stay out
    s.repair_nodes([node], 200)
    assert s.free.total_avail == 64 - 2


def test_spares_are_held_out_and_taken_near_a_failure(tiny4):
    s = Scheduler(tiny4, spare_nodes=2)
    assert s.free.total_avail == 64 - 8
    leaves = {int(s.free.levels[0].of_node[n]) for n in s.spares}
    assert len(leaves) == 2  # one per leaf in turn
    s.submit(Job("big", gpus=60, submit_s=0, duration_s=10), 0)
    assert s.schedule(0) == []  # spares are not scheduled
    near = [n for n in range(16) if int(s.free.levels[0].of_node[n]) == int(s.free.levels[0].of_node[s.spares[1]])][0]
    taken = s.take_spare(1, near=[near])
    assert taken and int(s.free.levels[0].of_node[taken[0]]) == int(s.free.levels[0].of_node[near])
    assert s.take_spare(5) is None
    assert s.spares == [3]
    s.fail_nodes([0], 1)
    s.repair_nodes([0], 2)  # an idle repaired node refills the pool
    assert s.spares == [3, 0] and s.free.total_avail == 64 - 8 - 0


def test_bad_node_ids(tiny4):
    s = Scheduler(tiny4)
    with pytest.raises(SpecError, match="node_ids"):
        s.fail_nodes([99], 0)
    with pytest.raises(SpecError, match="spare_nodes"):
        Scheduler(tiny4, spare_nodes=16)


def test_jobs_on_nodes_names_the_holders(tiny4):
    s = Scheduler(tiny4)
    s.submit(Job("a", gpus=8, submit_s=0, duration_s=500), 0)
    s.submit(Job("b", gpus=4, submit_s=0, duration_s=500), 0)
    starts = {d.job_id: d for d in s.schedule(0)}
    a_nodes = sorted({i // 4 for i in starts["a"].gpu_ids})
    b_nodes = sorted({i // 4 for i in starts["b"].gpu_ids})
    assert s.jobs_on_nodes(a_nodes) == ["a"] and s.jobs_on_nodes(b_nodes) == ["b"]
    assert s.jobs_on_nodes(a_nodes + b_nodes) == ["a", "b"]
    idle = next(n for n in range(16) if n not in a_nodes + b_nodes)
    assert s.jobs_on_nodes([idle]) == []
    with pytest.raises(SpecError):
        s.jobs_on_nodes([99])
