"""Expected goodput of a whole run (wanka.reliability.goodput, docs/reliability.md "Expected goodput
of a whole run"): Daly's closed form against a hand computation, the failure model's MTBF and the
recovery costs, and the layering (reliability imports neither plan nor sim)."""

import ast
import math
from pathlib import Path

import pytest

import wanka.reliability
from wanka.reliability import load_failure_model
from wanka.reliability.goodput import DETECT_S, MANUAL_S, RESTART_S, goodput_closed_form, run_goodput


def test_goodput_closed_form_against_a_hand_computation():
    # Daly 2006 with delta = 60 s, M = 3 h, R = 600 s, tau = 1800 s, by hand:
    # e^(600/10800) = 1.0571277, e^(1860/10800) - 1 = 0.1879418,
    # T_w / T_s = 10800 x 1.0571277 x 0.1879418 / 1800 = 1.1920709 -> goodput 0.838876
    assert goodput_closed_form(60.0, 10800.0, 600.0, 1800.0) == pytest.approx(0.838876, abs=2e-6)
    # first order (reliability.md s.3.2): 1 - delta/tau - (tau/2 + delta + R)/M = 0.822222, a lower bound here
    assert 0.822222 < goodput_closed_form(60.0, 10800.0, 600.0, 1800.0) < 0.822222 + 0.02
    # no failures: only the checkpoint stalls are lost
    assert goodput_closed_form(60.0, math.inf, 600.0, 1800.0) == pytest.approx(1800 / 1860)
    # Daly's interval is the best one: any other interval loses goodput
    best = goodput_closed_form(60.0, 10800.0, 600.0)
    assert all(best >= goodput_closed_form(60.0, 10800.0, 600.0, t) for t in (300.0, 900.0, 3600.0, 7200.0))


def test_run_goodput_takes_the_failure_model_and_recovery_costs():
    fm = load_failure_model("llama3-h100")
    g = run_goodput(fm, 16384, 8, checkpoint_s=10.0, restore_s=100.0)
    assert g.mtbf_h == pytest.approx(54 * 24 / 419, rel=1e-3)  # Llama 3: 419 interruptions in 54 days
    assert g.recovery_s == pytest.approx(DETECT_S + RESTART_S + 100.0 + 3 / 419 * MANUAL_S, rel=1e-3)
    assert g.goodput == pytest.approx(goodput_closed_form(10.0, g.mtbf_h * 3600, g.recovery_s), rel=1e-12)
    smaller = run_goodput(fm, 1024, 8, checkpoint_s=10.0, restore_s=100.0)
    assert smaller.goodput > g.goodput > 0.85  # fewer GPUs, fewer failures; Llama 3 reports > 90%




def test_reliability_imports_neither_plan_nor_sim():
    """plan imports reliability (run-level rows), sim imports both: reliability must import neither."""
    for path in Path(wanka.reliability.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith(("wanka.plan", "wanka.sim")) for n in names), (path.name, names)
