"""Goodput-optimal planning (sim/goodput.py, `wanka plan --objective goodput`)."""

import json

import pytest

from wanka.cli import main
from wanka.reliability.failures import load_failure_model
from wanka.reliability.spares import p99_spares
from wanka.sim.goodput import plan_goodput
from wanka.workload import load_model


@pytest.fixture(scope="module")
def small():
    return plan_goodput(load_model("llama3-70b"), "wanka-10k", gpus=1024)


def test_chosen_plan_is_at_least_the_baseline_and_says_whether_it_beats_it(small):
    chosen, base = small["chosen"], small["baseline"]
    assert chosen["tokens_per_day"] >= base["tokens_per_day"]
    separated = chosen["tokens_per_day_ci95"][0] > base["tokens_per_day_ci95"][1]
    assert small["beats_baseline"] == separated
    assert ("beats the baseline" in small["verdict"]) == separated


def test_baseline_is_fastest_layout_full_restart_with_a_p99_pool(small):
    base = small["baseline"]
    assert base["layout_rank"] == 1 and base["kind"] == "full_restart" and base["interval_factor"] == 1.0
    need = p99_spares(load_failure_model("llama3-h100"), 1024, 8, window_h=24.0)
    assert base["spare_nodes"] >= need
    assert base["reserved_gpus"] <= small["gpus"]


def test_tokens_per_day_is_ettr_times_planner_speed(small):
    for r in (small["chosen"], small["baseline"]):
        assert r["tokens_per_day"] == pytest.approx(r["ettr"] * r["tokens_per_s"] * 86400)


def test_frontier_adds_tokens_per_day_with_every_gpu_reserved(small):
    f = small["frontier"]
    assert [r["reserved_gpus"] for r in f] == sorted({r["reserved_gpus"] for r in f})
    assert all(a["tokens_per_day"] < b["tokens_per_day"] for a, b in zip(f, f[1:]))


def test_cli_objective_goodput_json(capsys):
    assert main(["plan", "--model", "llama3-70b", "--cluster", "wanka-10k", "--gpus", "1024", "--objective", "goodput",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == "goodput" and {"chosen", "baseline", "frontier", "verdict"} <= set(out)


def test_cli_goodput_refuses_a_given_layout(capsys):
    assert main(["plan", "--model", "llama3-70b", "--objective", "goodput", "--layout", "tp=8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--layout" in err and "\n" not in err
