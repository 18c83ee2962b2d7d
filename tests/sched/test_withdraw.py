"""Scheduler.withdraw: a cancelled queued job leaves the queue; the job behind it starts."""

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.sched import Job, Scheduler, Start


def test_withdrawn_queued_job_frees_the_head_and_a_running_one_frees_its_gpus():
    cluster = Cluster(parse_cluster_spec({"name": "c", "gpu": "h100-sxm", "gpus": 4, "gpus_per_node": 4}))
    s = Scheduler(cluster, queue="fifo", backfill=False, preemption=False)
    for jid, gpus in (("a", 4), ("b", 4), ("c", 2)):
        s.submit(Job(jid, gpus=gpus, submit_s=0.0), 0.0)
    assert [d.job_id for d in s.schedule(1.0)] == ["a"]
    s.withdraw("b", 2.0)  # queued: leaves without running
    assert [d.job_id for d in s.schedule(3.0)] == []  # a still holds every GPU
    s.withdraw("a", 4.0)  # running: finishes, its GPUs come back
    started = s.schedule(5.0)
    assert [d.job_id for d in started] == ["c"] and isinstance(started[0], Start)
    assert s.job_state("b").status == "done" and s.job_state("b").starts == 0
