"""`wanka simulate`: JSON keys, sweeps, HTML report, and one-line errors with exit code 2."""

import json
import re

import pytest

from wanka.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_json_keys(capsys):
    out = _json(capsys, ["simulate", "bloom-176b", "--runs", "3", "--seed", "2", "--json"])
    assert out["runs"] == 3 and out["seed"] == 2
    assert 0 < out["ettr"]["mean"] <= 1 and len(out["ettr"]["ci95"]) == 2
    for key in ("lost_work", "restart", "checkpoint_stall", "waiting_for_spares"):
        assert out["lost_gpu_hours"][key]["mean"] >= 0
    assert out["interruptions"]["unexpected"]["mean"] > 0
    assert "mean" in out["interruptions"]["planned"] and out["mttf_h"]["mean"] > 0
    assert out["goodput"]["mean"] <= out["ettr"]["mean"]  # spares are reserved GPU-hours too
    assert out["spares"]["pool_nodes"] == 4


def test_sweep_spares(capsys):
    out = _json(capsys, ["simulate", "sweep", "bloom-176b", "--param", "spares", "--values", "0,4", "--runs", "3", "--json"])
    assert [r["spares"] for r in out["rows"]] == [0, 4]
    assert out["rows"][0]["lost_gpu_hours"]["waiting_for_spares"] > out["rows"][1]["lost_gpu_hours"]["waiting_for_spares"]


def test_report_is_self_contained_html(tmp_path, capsys):
    path = tmp_path / "r.html"
    assert main(["simulate", "bloom-176b", "--runs", "2", "--report", str(path)]) == 0
    page = path.read_text()
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page and "http" not in page.split("<body>")[1]


@pytest.mark.parametrize("text, field", [
    ("jobs: [{gpus: 8}]\nduration_days: -1\n", "duration_days"),
    ("jobs: [{gpus: 8}]\nduration_days: 1\nrecovery: {kind: magic}\n", "recovery.kind"),
    ("jobs: [{gpus: 8}]\nduration_days: 1\ncheckpoint: {policy: fixed, write_s: 5}\n", "checkpoint.interval_s"),
    ("jobs: [{gpus: 8}]\nduration_days: 1\nfailures: {model: nope}\n", "failures.model"),
    ("jobs: [{gpus: 12}]\nduration_days: 1\ncheckpoint: {write_s: 5}\n", "jobs[0].gpus"),
    ("jobs: []\nduration_days: 1\n", "jobs"),
    ("jobs: [{gpus: 8, colour: red}]\nduration_days: 1\n", "jobs[0].colour"),
    ("jobs: [{gpus: 8}]\nduration_days: 1\nfailures: {causes: [{name: a}, {name: b, unit: rack9}]}\n", "failures.causes[1].unit"),
    ("jobs: [{gpus: 8}, {gpus: 0}]\nduration_days: 1\n", "jobs[1].gpus"),
])
def test_bad_scenario_exit_2_one_line(tmp_path, capsys, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err
    assert re.search(r"[a-z_]\.\d+[.:\[]", err) is None  # list positions read [i], never .i


def test_bad_flags(capsys):
    assert main(["simulate", "sweep", "bloom-176b", "--param", "colour", "--values", "1"]) == 2
    assert "--param" in capsys.readouterr().err
    assert main(["simulate", "sweep", "bloom-176b", "--param", "spares", "--values", "a,b"]) == 2
    assert "--values" in capsys.readouterr().err
    assert main(["simulate", "bloom-176b", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err


def test_predict_drain_study(capsys):
    out = _json(capsys, ["simulate", "predict", "rsc-mttf", "--runs", "3", "--json"])
    p = out["predictor"]
    assert 0 <= p["precision"] <= 1 and 0 <= p["recall"] <= p["recall_with_precursor"] <= 1
    assert out["prediction"]["enabled"] is True
    assert out["with_drain"]["drains"]["mean"] > 0 and out["without_drain"]["drains"]["mean"] == 0
    # hourly checkpoints: a drain saves ~30 min of lost work per averted failure
    assert out["with_drain"]["lost_gpu_hours"]["lost_work"] < out["without_drain"]["lost_gpu_hours"]["lost_work"]


def test_multijob_report_and_sweep(tmp_path, capsys):
    path = tmp_path / "m.html"
    assert main(["simulate", "wanka-10k-shared", "--runs", "1", "--report", str(path)]) == 0
    page = path.read_text()
    assert page.count("data:image/png;base64,") == 2 and "<script" not in page
    capsys.readouterr()
    out = _json(capsys, ["simulate", "sweep", "wanka-10k-shared", "--param", "checkpoint_interval",
                         "--values", "600,7200", "--runs", "1", "--json"])
    assert out["mode"] == "multi-job" and [r["value"] for r in out["rows"]] == [600, 7200]
    # rarer checkpoints lose more work per failure
    assert out["rows"][0]["ettr_gpu_hour_weighted"] > out["rows"][1]["ettr_gpu_hour_weighted"]
