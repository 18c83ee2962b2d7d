"""One recovery implementation serves the job, multi-job and whole-cluster twins.

Every twin asks RecoveryPolicy.respond (wanka.reliability.recovery) what a failure does to a job, once
per job interruption, and applies the answer; so a policy changes in one place."""

import numpy as np
import pytest

from wanka.reliability.recovery import RecoveryPolicy
from wanka.sim import compile_scenario, parse_scenario, simulate
from wanka.sim.fleet import FleetConfig, FleetTrace, simulate_fleet
from wanka.sim.multijob import simulate_cluster

LLAMA3_X30 = {"model": "llama3-h100", "scale": 30.0}  # has a hang cause (nccl_watchdog_timeout)


def _job(hang_detect_s=600.0):
    return parse_scenario({
        "name": "one", "cluster": "wanka-10k", "cluster_gpus": 1280,
        "jobs": [{"name": "j", "gpus": 1024, "step_time_s": 5.0}], "failures": LLAMA3_X30,
        "checkpoint": {"policy": "young", "mode": "async", "write_s": 60, "stall_s": 1, "restore_s": 60},
        "recovery": {"kind": "hot_spare", "spares": 4, "hang_detect_s": hang_detect_s},
        "duration_days": 10, "runs": 3, "seed": 2})


def _jobs(hang_detect_s=600.0):
    return parse_scenario({
        "name": "mj", "cluster": "wanka-10k", "cluster_gpus": 512,
        "jobs": [{"name": "a", "gpus": 256, "step_time_s": 5, "work_h": 100},
                 {"name": "b", "gpus": 128, "step_time_s": 5, "work_h": 80}],
        "failures": LLAMA3_X30,
        "checkpoint": {"policy": "young", "mode": "async", "stall_s": 1, "write_s": 60, "restore_s": 60},
        "recovery": {"kind": "full_restart", "spares": 0, "repair_h": 12, "hang_detect_s": hang_detect_s},
        "duration_days": 6, "runs": 2, "seed": 4})


def _fleet(hang_detect_s=600.0):
    rng = np.random.default_rng(3)
    n = 300
    tr = FleetTrace("synthetic", np.sort(rng.random(n)) * 4 * 86400, rng.exponential(6 * 3600, n) + 60,
                    rng.choice([1, 8, 16, 32], n), rng.random(n) < 0.8)
    cfg = FleetConfig(gpus=128, days=5, failure_scale=2000, repair_h=2,
                      recovery=RecoveryPolicy(restart_s=300.0, requeue_s=300.0, hang_detect_s=hang_detect_s))
    return simulate_fleet(cfg, tr, runs=2, seed=5)


@pytest.fixture
def decisions(monkeypatch):
    """Record every RecoveryPolicy.respond answer."""
    seen = []
    respond = RecoveryPolicy.respond

    def spy(self, failure, replicas_left, spare_ready=True):
        seen.append(respond(self, failure, replicas_left, spare_ready))
        return seen[-1]

    monkeypatch.setattr(RecoveryPolicy, "respond", spy)
    return seen


def test_the_job_twin_asks_the_policy_once_per_failure(decisions):
    out = simulate(compile_scenario(_job()))
    assert len(decisions) == round(out["interruptions"]["unexpected"]["mean"] * out["runs"]) > 0


def test_the_multi_job_twin_asks_the_policy_once_per_job_hit(decisions):
    out = simulate_cluster(_jobs())
    assert len(decisions) == round(out["job_interruptions"]["mean"] * out["runs"]) > 0


def test_the_fleet_twin_asks_the_policy_once_per_job_hit(decisions):
    out = _fleet()
    assert len(decisions) == round(out["job_interruptions"]["mean"] * out["runs"]) > 0


def test_a_policy_field_reaches_every_twin():
    # a hang is seen only after hang_detect_s, in each twin: a slower watchdog costs more restart time
    fast, slow = simulate(compile_scenario(_job(60.0))), simulate(compile_scenario(_job(6000.0)))
    assert slow["lost_gpu_hours"]["restart"]["mean"] > fast["lost_gpu_hours"]["restart"]["mean"]
    fast, slow = simulate_cluster(_jobs(60.0)), simulate_cluster(_jobs(6000.0))
    restart = lambda out: sum(j["lost_gpu_hours"]["restart"]["mean"] for j in out["jobs"])  # noqa: E731
    assert restart(slow) > restart(fast)
    fast, slow = _fleet(60.0), _fleet(6000.0)
    assert slow["gpu_hours"]["restart"]["mean"] > fast["gpu_hours"]["restart"]["mean"]
