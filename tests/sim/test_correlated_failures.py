"""Correlated failures: a leaf switch takes down every node under it, and recovery needs that many
spare nodes at once. One injected failure, checked against a hand-computed timeline."""

import math

import numpy as np
import pytest

from wanka.reliability.spares import p99_spares
from wanka.sim import compile_scenario, simulate
from wanka.sim.engine import FAIL, _Run
from wanka.sim.multijob import simulate_cluster

DAY = 86400.0
# wanka-10k is a rail-optimized fat-tree: a leaf group is 32 nodes (256 GPUs) under 8 rail switches
LEAF = {"name": "tor", "unit": "leaf", "rate_per_switch_day": 0.0, "recovery": "node_swap", "scope": "node",
        "repair_h": 4.0}
SYNC_HOURLY = {"policy": "fixed", "interval_s": 3600, "mode": "sync", "write_s": 60, "restore_s": 60}


def _one_leaf_failure(scenario, spares: int, t0: float):
    sc = scenario(failures={"causes": [LEAF]}, checkpoint=SYNC_HOURLY, duration_days=2,
                  recovery={"kind": "hot_spare", "spares": spares, "detect_s": 60, "restart_s": 300, "swap_s": 60})
    cfg = compile_scenario(sc).config
    run = _Run(cfg, np.random.default_rng(0), trace=False)
    out = run.run([(t0, 0, FAIL, (0, 0, 0.0, 1.0, 0.0))])  # failure 0 of cause 0 hits the first leaf group
    assert math.isclose(sum(out["acc"].values()), cfg.duration_s, rel_tol=1e-9)
    return cfg, out


def test_blast_radius_from_node_groups(scenario):
    cfg = compile_scenario(scenario(failures={"causes": [LEAF]})).config
    # 1,024 GPUs = 128 nodes = 4 leaf groups of 32 nodes; replicas (tp=8, pp=2) are 2 nodes, so 16 per leaf
    assert cfg.cause_blast[0].tolist() == [[32, 16]] * 4
    assert cfg.failures.causes[0].units(cfg.gpus, 8) == 4 * 8  # 4 groups x 8 rail switches


@pytest.mark.parametrize("spares, wait_s", [(40, 0.0), (31, 4 * 3600.0 - 60.0)])
def test_one_leaf_failure_by_hand(scenario, spares, wait_s):
    t0 = 10 * 3660.0 + 1800.0  # 10 cycles of (1 h compute + 60 s sync write), then 30 min of compute
    cfg, out = _one_leaf_failure(scenario, spares, t0)
    acc = out["acc"]
    assert out["counts"]["correlated"] == 1 and out["counts"]["blast_nodes"] == 32
    assert acc["lost_work"] == pytest.approx(1800.0)  # back to the checkpoint at 10 h of compute
    # detect 60 s; then 32 nodes: with >= 32 spares at once, else the leaf's own nodes after the 4 h
    # switch repair; then swap 60 + restart 300 + restore 60
    assert acc["restart"] == pytest.approx(60.0 + 420.0)
    assert acc["waiting_for_spares"] == pytest.approx(wait_s)
    resume = t0 + 60.0 + wait_s + 420.0
    e = 2 * DAY - resume
    q, r = divmod(e, 3660.0)
    compute_after = q * 3600.0 + min(r, 3600.0)
    assert acc["useful"] == pytest.approx(36000.0 + compute_after)  # ETTR = this / 2 days
    if wait_s:  # 31 spares cannot cover 32 nodes: the job waits for the switch repair, and the ETTR
        _, full = _one_leaf_failure(scenario, 40, t0)  # loses that wait less the writes it skips
        lost_ettr = (full["acc"]["useful"] - acc["useful"]) / (2 * DAY)
        assert lost_ettr == pytest.approx(wait_s * 3600.0 / 3660.0 / (2 * DAY), abs=60.0 / (2 * DAY))


def test_leaf_failure_rate_and_nodes_lost(scenario):
    rate = 0.02  # per leaf switch-day: 4 groups x 8 switches x 20 days -> 12.8 failures expected
    sc = scenario(failures={"causes": [{**LEAF, "rate_per_switch_day": rate}]}, runs=20,
                  recovery={"kind": "hot_spare", "spares": 64})
    out = simulate(compile_scenario(sc))
    expected = rate * 32 * 20
    assert out["interruptions"]["expected_unexpected"] == pytest.approx(expected)
    assert out["interruptions"]["correlated"]["mean"] == pytest.approx(expected, abs=4 * math.sqrt(expected / 20))
    assert out["spares"]["nodes_lost_in_group_failures"]["mean"] == pytest.approx(32 * out["interruptions"]["correlated"]["mean"])
    few = simulate(compile_scenario(scenario(failures={"causes": [{**LEAF, "rate_per_switch_day": rate}]}, runs=20,
                                              recovery={"kind": "hot_spare", "spares": 16})))
    assert few["lost_gpu_hours"]["waiting_for_spares"]["mean"] > 0 == out["lost_gpu_hours"]["waiting_for_spares"]["mean"]
    assert few["ettr"]["mean"] < out["ettr"]["mean"]


def test_torchft_drops_every_replica_under_the_leaf(scenario):
    sc = scenario(failures={"causes": [{**LEAF, "rate_per_switch_day": 0.02}]}, recovery={"kind": "torchft", "spares": 64})
    out = simulate(compile_scenario(sc))
    assert out["interruptions"]["correlated"]["mean"] > 0
    assert out["lost_gpu_hours"]["lost_work"]["mean"] == 0
    assert out["lost_gpu_hours"]["degraded"]["mean"] > 0


def test_p99_pool_sizes_for_single_nodes_only(scenario):
    from wanka.sim.compile import failure_model_of

    node = {"name": "gpu", "unit": "node", "rate_per_unit_day": 0.02, "recovery": "node_swap", "scope": "node"}
    both = failure_model_of(scenario(failures={"causes": [node, {**LEAF, "rate_per_switch_day": 0.02}]}))
    alone = failure_model_of(scenario(failures={"causes": [node]}))
    assert p99_spares(both, 1024, 8) == p99_spares(alone, 1024, 8)  # ByteRobust section 6.2 [P]


def test_multijob_leaf_failure_stops_every_job_under_it():
    from wanka.sim import parse_scenario

    sc = parse_scenario({
        "name": "mj", "cluster": "wanka-10k", "cluster_gpus": 1024,
        "jobs": [{"name": "a", "gpus": 256, "step_time_s": 5, "work_h": 60},
                 {"name": "b", "gpus": 256, "step_time_s": 5, "work_h": 60}],
        "failures": {"causes": [{**LEAF, "rate_per_switch_day": 0.05}]},
        "checkpoint": {"policy": "fixed", "interval_s": 3600, "mode": "async", "write_s": 60, "restore_s": 60},
        "recovery": {"kind": "full_restart", "spares": 0, "detect_s": 60, "restart_s": 300},
        "duration_days": 6, "runs": 3, "seed": 1})
    out = simulate_cluster(sc)
    # 4 leaf groups x 8 switches x 0.05/day x 6 days = 9.6 leaf failures per run; each takes 32 nodes
    assert out["failures"]["mean"] == pytest.approx(9.6, abs=4 * math.sqrt(9.6 / 3))
    assert out["nodes_down_per_failure"]["mean"] == pytest.approx(32)
    assert out["job_interruptions"]["mean"] > 0
