"""Step-level commit semantics for per-step fault tolerance (torchft, FT-HSDP): S3 and S4."""

import pytest

from wanka.sim import compile_scenario, load_scenario, parse_scenario, simulate


def _killloop(every_s: float, **recovery):
    base = load_scenario("torchft-killloop").model_dump(exclude_none=True)
    base["kill_loop"]["every_s"] = every_s
    base["recovery"].update(recovery)
    return simulate(compile_scenario(parse_scenario(base)))


@pytest.fixture(scope="module")
def every60():
    return _killloop(60)


def test_kill_every_60s_lands_in_torchft_band(every60):
    # TorchFT micro-benchmark (PyTorch blog "Fault Tolerant Llama", 2025-06-20, setup [P]): about 81%
    # measured, as relayed in issue 13 [S] (the figure itself was not found in the blog copies searched,
    # docs/sim.md); band 76-86%: issue 13's acceptance band, +-5 points around 81%
    assert 0.76 <= every60["ettr"]["mean_ci95"][0] and every60["ettr"]["mean_ci95"][1] <= 0.86


def test_kill_every_15s_commits_few_steps():
    out = _killloop(15)
    # about 13% measured [S] (issue 13; bound <= 25% there): at 15 s an 11 s step after a 5 s quorum
    # change rarely finishes before the next kill
    assert out["ettr"]["mean"] <= 0.25
    assert out["steps"]["committed_fraction"]["mean"] < 0.25


def test_each_kill_discards_the_step_in_flight(every60):
    steps = every60["steps"]
    kills = every60["interruptions"]["by_cause"]["kill_loop"]["mean"]
    # every kill lands while the job runs or during a quorum change; at most one step is discarded per kill
    assert 0.8 * kills <= steps["discarded"]["mean"] <= kills
    lost_h = every60["lost_gpu_hours"]["discarded_step"]["mean"] / every60["job"]["gpus"]
    per_step_s = lost_h * 3600 / steps["discarded"]["mean"]
    assert 0 < per_step_s < steps["step_time_s"]  # a partial step, never more than one step
    assert every60["lost_gpu_hours"]["lost_work"]["mean"] == 0  # nothing rolls back to a checkpoint


def test_mean_healthy_replicas_follows_littles_law(every60):
    # replicas down on average = kill rate x time down (Little's law): 20 s / 60 s = 1/3 of a replica
    dp = every60["replicas"]["dp"]
    assert every60["replicas"]["mean_healthy"]["mean"] == pytest.approx(dp - 20 / 60, abs=0.02)


def test_quorum_changes_cost_their_time():
    free = _killloop(15, reconfig_s=0, join_s=0)
    paid = _killloop(15)
    assert free["ettr"]["mean"] > paid["ettr"]["mean"] + 0.3
    assert free["lost_gpu_hours"]["restart"]["mean"] == 0 < paid["lost_gpu_hours"]["restart"]["mean"]
    # with free quorum changes a kill still discards the step in flight: about half an 11 s step per 15 s
    assert free["ettr"]["mean"] < 0.85


@pytest.fixture(scope="module")
def s4():
    base = load_scenario("ft-hsdp-100k").model_dump(exclude_none=True)
    out = {}
    for kind in ("full_restart", "torchft"):
        out[kind] = simulate(compile_scenario(parse_scenario({**base, "recovery": {**base["recovery"], "kind": kind}})))
    return out


def test_s4_ft_hsdp_100k_within_8_points(s4):
    # arXiv 2602.00277 abstract [A]: synchronous 44%, FT-HSDP 80% effective training time at O(100k) GPUs;
    # +-8 points: issue 13's band, because the failure rate is fitted (x1.4 Llama 3 rates, docs/sim.md)
    assert s4["full_restart"]["ettr"]["mean"] == pytest.approx(0.44, abs=0.08)
    assert s4["torchft"]["ettr"]["mean"] == pytest.approx(0.80, abs=0.08)
    assert s4["torchft"]["steps"]["committed_fraction"]["mean"] > 0.95
