"""S7: the twin's Monte-Carlo ETTR follows Daly's T_w and peaks at Daly's tau_opt."""

import numpy as np
import pytest

from wanka.reliability import daly_interval, daly_wall_time
from wanka.sim import compile_scenario, parse_scenario, simulate

DELTA, R = 300.0, 600.0  # Daly's figures: delta = 5 min, R = 10 min


def _scenario(mtbf_s, tau_s, days):
    return parse_scenario({
        "name": "s7", "cluster": "wanka-10k", "jobs": [{"gpus": 8, "step_time_s": 1.0}],
        "failures": {"causes": [{"name": "f", "unit": "node", "rate_per_unit_day": 86400.0 / mtbf_s,
                                 "recovery": "restart", "scope": "job"}]},
        "checkpoint": {"policy": "fixed", "interval_s": tau_s, "mode": "sync", "write_s": DELTA, "restore_s": 0},
        "recovery": {"detect_s": 0, "restart_s": R}, "duration_days": days, "runs": 4, "seed": 3})


@pytest.mark.parametrize("mtbf_h, days", [(6.0, 2000), (0.25, 60)])
def test_simulated_optimum_matches_daly(mtbf_h, days):
    m = mtbf_h * 3600.0
    tau_opt = daly_interval(DELTA, m)
    factors = np.array([0.5, 0.7, 1.0, 1.4, 2.0])
    ettr, half = [], []
    for f in factors:
        out = simulate(compile_scenario(_scenario(m, tau_opt * f, days)))
        ettr.append(out["ettr"]["mean"])
        half.append(out["ettr"]["mean"] - out["ettr"]["mean_ci95"][0])
        closed = 1.0 / daly_wall_time(tau_opt * f, DELTA, m, R, 1.0)  # T_s / T_w
        assert out["ettr"]["mean"] == pytest.approx(closed, abs=4 * half[-1] + 1e-3)
    ettr = np.array(ettr)
    assert ettr[2] > ettr[0] and ettr[2] > ettr[-1]  # the optimum beats half and double the interval
    a, b, _ = np.polyfit(np.log(factors), ettr, 2)  # parabola in log(tau): vertex = simulated optimum
    vertex = np.exp(-b / (2 * a))
    assert a < 0 and vertex == pytest.approx(1.0, abs=0.15)
