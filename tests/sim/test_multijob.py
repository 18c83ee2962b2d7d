"""Multi-job twin through wanka.sched: failures stop the jobs on a node, requeue, restart."""

import pytest

from wanka.sim import parse_scenario
from wanka.sim.multijob import simulate_cluster


def _sc(**recovery):
    return parse_scenario({
        "name": "mj", "cluster": "wanka-10k", "cluster_gpus": 512,
        "jobs": [{"name": "big", "gpus": 256, "step_time_s": 5, "work_h": 100},
                 {"name": "mid", "gpus": 128, "step_time_s": 5, "work_h": 80},
                 {"name": "late", "gpus": 128, "step_time_s": 5, "work_h": 40, "submit_h": 10}],
        "failures": {"model": "llama3-h100", "scale": 30.0},  # ~0.3 failures/h on 64 nodes
        "checkpoint": {"policy": "young", "mode": "async", "stall_s": 1, "write_s": 60, "restore_s": 60},
        "recovery": {"kind": "full_restart", "spares": 0, "detect_s": 60, "restart_s": 300, "repair_h": 12, **recovery},
        "duration_days": 10, "runs": 3, "seed": 4})


def test_deterministic_and_jobs_finish():
    a, b = simulate_cluster(_sc()), simulate_cluster(_sc())
    assert a == b
    for job in a["jobs"]:
        assert job["finished"]["mean"] == 1.0
        assert job["interruptions"]["mean"] > 0
        assert job["completion_h"]["mean"] > job["work_h"]  # failures cost time
        assert 0.5 < job["ettr"]["mean"] < 1.0
    assert a["job_interruptions"]["mean"] <= a["failures"]["mean"]


def test_full_cluster_without_spares_waits_for_repair():
    waits = simulate_cluster(_sc())
    spare = simulate_cluster(parse_scenario({**_sc().model_dump(exclude_none=True), "cluster_gpus": 640,
                                             "recovery": {**_sc().recovery.model_dump(), "kind": "hot_spare", "spares": 16}}))
    queued = lambda out: sum(j["lost_gpu_hours"]["queued"]["mean"] for j in out["jobs"])  # noqa: E731
    assert queued(waits) > 0
    assert queued(spare) < queued(waits)
    assert spare["ettr_gpu_hour_weighted"] > waits["ettr_gpu_hour_weighted"]


def test_needs_work_h():
    data = _sc().model_dump(exclude_none=True)
    data["jobs"][1].pop("work_h")
    from wanka.errors import SpecError
    with pytest.raises(SpecError, match=r"jobs\[1\]\.work_h"):
        simulate_cluster(parse_scenario(data))
