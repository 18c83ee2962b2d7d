"""Drain-and-migrate before predicted failures shows in the twin's ETTR."""

from wanka.sim import compile_scenario, simulate

PRECURSORS = {"causes": [{"name": "gpu", "unit": "node", "rate_per_unit_day": 0.02, "recovery": "node_swap",
                          "scope": "node", "precursor_share": 0.6}]}
HOURLY_SYNC = {"policy": "fixed", "interval_s": 3600, "mode": "sync", "write_s": 120}


def test_drain_before_failure_raises_ettr(scenario):
    base = scenario(failures=PRECURSORS, checkpoint=HOURLY_SYNC, runs=12)
    off = simulate(compile_scenario(base))
    on = simulate(compile_scenario(scenario(failures=PRECURSORS, checkpoint=HOURLY_SYNC, runs=12, prediction={
        "enabled": True, "recall": 0.8, "precision": 0.9, "lead_s": 3600, "drain_s": 60})))
    assert on["prediction"]["drains"]["mean"] > 0
    assert on["prediction"]["averted_failures"]["mean"] > 0.3 * off["interruptions"]["unexpected"]["mean"]
    assert on["interruptions"]["unexpected"]["mean"] < 0.75 * off["interruptions"]["unexpected"]["mean"]
    assert on["lost_gpu_hours"]["lost_work"]["mean"] < off["lost_gpu_hours"]["lost_work"]["mean"]
    assert on["ettr"]["mean"] > off["ettr"]["mean"]


def test_false_alarms_cost_ettr(scenario):
    kw = dict(failures=PRECURSORS, checkpoint=HOURLY_SYNC, runs=12)
    good = simulate(compile_scenario(scenario(**kw, prediction={"enabled": True, "recall": 0.8, "lead_s": 3600,
                                                                "false_alarms_per_node_day": 0.0})))
    noisy = simulate(compile_scenario(scenario(**kw, prediction={"enabled": True, "recall": 0.8, "lead_s": 3600,
                                                                 "false_alarms_per_node_day": 0.05})))
    assert noisy["prediction"]["false_drains"]["mean"] > 50
    assert noisy["ettr"]["mean"] < good["ettr"]["mean"]
