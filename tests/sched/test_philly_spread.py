"""On a slice of the Philly trace, topology-aware best-fit places more gangs at minimal spread than
first-fit (the full-trace figures are printed by benchmarks/sched_replay.py)."""

from wanka.cluster import load_cluster
from wanka.sched.runs import load_workload, run_policy


def test_topo_bestfit_beats_first_fit_on_minimal_spread():
    c = load_cluster("wanka-10k", gpus=512)
    work = load_workload("philly", c, limit=4000)
    ff = run_policy(c, work, "first-fit/fifo")
    tb = run_policy(c, work, "topo-bestfit/fifo")
    assert ff["gang_starts"] > 100 and tb["gang_starts"] > 100
    assert tb["minimal_spread_share"] > ff["minimal_spread_share"] + 0.2
    for row in (ff, tb):
        assert row["finished"] == 4000 and row["mean_jct_s"] > 0 and 0 < row["utilization"] <= 1
