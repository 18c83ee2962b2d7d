"""The scheduler builds on every cluster preset (nested topology groups) and packs a 1,024-GPU gang
at minimal spread on an empty cluster."""

import pytest

from wanka.cluster import cluster_names, load_cluster
from wanka.sched import Job, Scheduler
from wanka.sched.placement import spread


@pytest.mark.parametrize("name", cluster_names())
def test_empty_cluster_gang_at_minimal_spread(name):
    c = load_cluster(name)
    s = Scheduler(c)
    g = min(1024, c.gpus)
    s.submit(Job("g", gpus=g, submit_s=0, duration_s=10), 0)
    (start,) = s.schedule(0)
    assert len(set(start.gpu_ids)) == g
    nodes = sorted({i // c.gpus_per_node for i in start.gpu_ids})
    assert spread(s.free, nodes) == s.minimal_spread(g)
    assert start.speed_factor == pytest.approx(1.0)
