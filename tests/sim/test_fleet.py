"""Whole-cluster twin (sim/fleet.py): closed forms, time accounting, determinism, validation."""

import numpy as np
import pytest

from wanka.cli import main
from wanka.errors import SpecError
from wanka.sim.fleet import FleetConfig, FleetTrace, _FleetRun, checkpoint_intervals, job_accounts, simulate_fleet
from wanka.reliability.failures import load_failure_model
from wanka.reliability.recovery import RecoveryPolicy


def _trace(n=400, seed=3, max_gpus=32):
    rng = np.random.default_rng(seed)
    return FleetTrace("synthetic", np.sort(rng.random(n)) * 5 * 86400, rng.exponential(6 * 3600, n) + 60,
                      rng.choice([1, 2, 4, 8, 16, max_gpus], n), rng.random(n) < 0.8)


def test_no_failures_on_an_empty_cluster_every_job_runs_its_work():
    tr = _trace(50)
    out = simulate_fleet(FleetConfig(gpus=4096, days=10, failure_scale=0), tr, runs=1)
    assert out["ettr_job_weighted"]["mean"] == pytest.approx(1.0)
    assert out["queue_h"]["mean"]["mean"] == 0
    useful_gpu_h = float((tr.work_s * tr.gpus).sum()) / 3600
    assert out["cluster_goodput"]["mean"] * 4096 * 240 == pytest.approx(useful_gpu_h, rel=1e-9)


def test_fifo_whole_cluster_jobs_wait_for_each_other():
    tr = FleetTrace("two", np.array([0.0, 10.0]), np.array([3600.0, 3600.0]), np.array([64, 64]), np.array([False, False]))
    out = simulate_fleet(FleetConfig(gpus=64, days=1, failure_scale=0), tr, runs=1)
    # the second job queues from t=10 s until the first ends at 3600 s
    assert out["queue_h"]["mean"]["mean"] == pytest.approx((3600 - 10) / 3600 / 2)


@pytest.fixture(scope="module")
def busy():
    cfg = FleetConfig(gpus=64, days=6, failure_scale=3000, repair_h=2)
    tr = _trace()
    model = load_failure_model(cfg.failure_model).scaled(cfg.failure_scale)
    rng = np.random.default_rng(5)
    times_h, causes = model.draw(rng, cfg.days * 24, cfg.gpus, cfg.gpus_per_node)
    run = _FleetRun(cfg, tr, model, checkpoint_intervals(cfg, tr, model))
    run.run(times_h * 3600, causes, rng.random(len(times_h)), model)
    return cfg, run


def test_time_accounting_closes_per_job(busy):
    cfg, run = busy
    acc = job_accounts(run, cfg.days * 86400, run.tr.submit_s)
    total = acc["useful"] + acc["lost"] + acc["restart"] + acc["checkpoint_stall"] + acc["queued"]
    np.testing.assert_allclose(total, acc["wall"], atol=1e-6)
    for k in ("lost", "restart", "checkpoint_stall", "queued"):
        assert acc[k].min() >= -1e-9 and acc[k].sum() > 0  # every mechanism was exercised
    assert run.c["job_failures"] > 0 and run.c["preemptions"] > 0


def test_checkpoint_interval_is_young_per_job_size(busy):
    cfg, run = busy
    tr = run.tr
    model = load_failure_model(cfg.failure_model).scaled(cfg.failure_scale)
    per_gpu_s = model.rate_per_hour(cfg.gpus, cfg.gpus_per_node) / 3600 / cfg.gpus
    j = int(np.argmax(tr.gpus))
    assert run.tau[j] == pytest.approx(np.sqrt(2 * cfg.write_s / (per_gpu_s * tr.gpus[j])))  # Young 1974


def test_deterministic_from_a_seed():
    cfg, tr = FleetConfig(gpus=128, days=6, failure_scale=2000), _trace(200)
    a, b = simulate_fleet(cfg, tr, runs=3, seed=9), simulate_fleet(cfg, tr, runs=3, seed=9)
    assert a == b
    c = simulate_fleet(cfg, tr, runs=3, seed=10)
    assert c["failures"] != a["failures"]


def test_runs_in_worker_processes_give_the_same_result():
    cfg, tr = FleetConfig(gpus=64, days=6, failure_scale=3000, repair_h=2), _trace(150)
    one = simulate_fleet(cfg, tr, runs=3, seed=4)
    assert one["preemptions"]["mean"] > 0 and one["job_interruptions"]["mean"] > 0  # the slow paths ran
    assert simulate_fleet(cfg, tr, runs=3, seed=4, workers=2) == one


def test_bad_worker_count_names_the_field():
    with pytest.raises(SpecError) as err:
        simulate_fleet(FleetConfig(gpus=64, days=1), _trace(5), runs=1, workers=0)
    assert err.value.field == "workers"


@pytest.mark.parametrize(("kw", "field"), [({"gpus": 1001}, "gpus"), ({"days": 0}, "days"),
                                           ({"failure_scale": -1}, "failure_scale"),
                                           ({"recovery": RecoveryPolicy(kind="torchft")}, "recovery.kind")])
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(SpecError) as err:
        FleetConfig(**kw)
    assert err.value.field == field


@pytest.mark.parametrize(("flag", "value"), [("--scale", "-2"), ("--workers", "0")])
def test_cli_bad_flag_is_one_line_exit_2(capsys, flag, value):
    assert main(["simulate", "fleet", "philly", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err


def _two_jobs(b_preemptible: bool, fail_h: float):
    cfg = FleetConfig(gpus=16, days=2, failure_scale=0, repair_h=24)
    tr = FleetTrace("two", np.array([0.0, 0.0]), np.array([40 * 3600.0, 40 * 3600.0]), np.array([8, 8]),
                    np.array([True, b_preemptible]))
    model = load_failure_model(cfg.failure_model)
    assert model.causes[0].recovery == "node_swap"
    run = _FleetRun(cfg, tr, model, np.array([np.inf, np.inf]))
    run.run(np.array([fail_h * 3600.0]), np.array([0]), np.array([0.1]), model)  # lands on job 0's GPUs
    return run


def test_a_failed_job_preempts_an_old_preemptible_job():
    run = _two_jobs(b_preemptible=True, fail_h=3.0)
    assert run.c["preemptions"] == 1  # job 1 has run 3 h >= 2 h (Meta RSC rule [Q])
    assert run.acc["lost"][1] == pytest.approx(3 * 3600.0)  # no checkpoint yet: it rolls back to the start


def test_no_preemption_of_young_or_non_preemptible_jobs():
    assert _two_jobs(b_preemptible=False, fail_h=3.0).c["preemptions"] == 0
    young = _two_jobs(b_preemptible=True, fail_h=1.0)
    assert young.c["preemptions"] == 0  # job 1 has run only 1 h
    assert young.acc["queued"][0] > 0  # job 0 waits for its node's repair instead
