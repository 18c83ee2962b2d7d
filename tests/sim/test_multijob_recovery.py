"""Multi-job twin: elastic shrink and torchft-style replica recovery through the scheduler."""

import pytest

from wanka.sim import parse_scenario
from wanka.sim.multijob import simulate_cluster


def _sc(kind):
    return parse_scenario({
        "name": "mj", "cluster": "wanka-10k", "cluster_gpus": 512,  # full: a failed node waits 12 h for repair
        "jobs": [{"name": "big", "gpus": 256, "step_time_s": 5, "work_h": 100},
                 {"name": "mid", "gpus": 128, "step_time_s": 5, "work_h": 80},
                 {"name": "late", "gpus": 128, "step_time_s": 5, "work_h": 40, "submit_h": 10}],
        "failures": {"model": "llama3-h100", "scale": 30.0},
        "checkpoint": {"policy": "young", "mode": "async", "stall_s": 1, "write_s": 60, "restore_s": 60},
        "recovery": {"kind": kind, "spares": 0, "detect_s": 60, "restart_s": 300, "repair_h": 12},
        "duration_days": 10, "runs": 3, "seed": 4})


@pytest.fixture(scope="module")
def outs():
    return {k: simulate_cluster(_sc(k)) for k in ("full_restart", "elastic", "torchft")}


def _sum(out, key):
    return sum(j["lost_gpu_hours"][key]["mean"] for j in out["jobs"])


def test_elastic_restarts_smaller_instead_of_queueing(outs):
    rigid, elastic = outs["full_restart"], outs["elastic"]
    assert _sum(rigid, "queued") > 0 and _sum(elastic, "queued") < 0.1 * _sum(rigid, "queued")
    assert _sum(elastic, "degraded") > 0  # ran with fewer replicas until it grew back
    assert elastic["resizes"]["mean"] > 0  # grew back when repaired nodes returned
    assert elastic["ettr_gpu_hour_weighted"] > rigid["ettr_gpu_hour_weighted"]


def test_torchft_keeps_progress_on_node_failures(outs):
    elastic, ft = outs["elastic"], outs["torchft"]
    assert ft["torchft_recoveries"]["mean"] > 0
    # only job-scoped (software) failures roll back under torchft; node failures do not
    assert _sum(ft, "lost_work") < 0.5 * _sum(elastic, "lost_work")
    assert ft["ettr_gpu_hour_weighted"] > elastic["ettr_gpu_hour_weighted"]
    assert all(j["finished"]["mean"] == 1.0 for j in ft["jobs"])
