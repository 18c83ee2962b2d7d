"""`wanka plan calibrate`'s fit (wanka.plan.calibrate) on runs whose truth is known: step times the
planner itself gives under chosen multipliers must give those multipliers back."""

from pathlib import Path

import pytest
import yaml

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.calibrate import MeasuredRun, Pricer, fit, held_out_errors
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.workload import load_model

CLUSTER = {"name": "h100-64", "gpu": "h100-sxm", "gpus": 64, "gpus_per_node": 8,
           "scale_up": {"domain": 8, "bandwidth_GBps": 450},
           "scale_out": {"bandwidth_Gbps": 400, "topology": "fat-tree", "tiers": 2}}
TRUTH = {"gemm": 0.8, "attention": 1.0, "hbm": 1.0, "network": 0.5}
LAYOUTS = [("tp=8,gbs=16", 8), ("tp=2,pp=2,gbs=32", 16), ("tp=8,pp=2,mbs=2,gbs=64", 64), ("tp=1,pp=4,gbs=32", 16),
           ("tp=4,gbs=64", 64)]


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "h100-64.yaml"
    path.write_text(yaml.safe_dump(CLUSTER))
    return path


def _runs(cluster_file, scales):
    model = load_model("llama3-8b")
    out = []
    for text, gpus in LAYOUTS:
        c = load_cluster(str(cluster_file), gpus=gpus, efficiency=scales)
        step = estimate(model, c, Layout.parse(text)).step_time_s
        out.append(MeasuredRun(text, model, Layout.parse(text), gpus, model.seq_len, Options(), step))
    return out


def test_fit_recovers_the_multipliers_the_runs_were_made_with(cluster_file):
    runs = _runs(cluster_file, TRUTH)
    scales = fit(Pricer(str(cluster_file)), runs, ("gemm", "network"))
    assert scales["gemm"] == pytest.approx(TRUTH["gemm"], rel=0.03)
    assert scales["network"] == pytest.approx(TRUTH["network"], rel=0.15)  # the network is a smaller share
    assert scales["hbm"] == 1.0 and scales["attention"] == 1.0  # not fitted: unchanged


def test_held_out_error_falls_after_fitting(cluster_file):
    before, after, scheme = held_out_errors(Pricer(str(cluster_file)), _runs(cluster_file, TRUTH), ("gemm", "network"))
    assert scheme == "leave-one-out"
    assert max(abs(x) for x in after) < 0.05 and max(abs(x) for x in after) < min(abs(x) for x in before) / 3


def test_a_profile_scales_the_planner_and_prices_as_its_constants_say(cluster_file, tmp_path):
    model = load_model("llama3-8b")
    base = estimate(model, load_cluster(str(cluster_file)), Layout.parse("tp=8,gbs=16"))
    slow = estimate(model, load_cluster(str(cluster_file), efficiency={"gemm": 0.5}), Layout.parse("tp=8,gbs=16"))
    assert slow.breakdown["compute"] > 1.6 * base.breakdown["compute"]  # GEMMs dominate: ~2x
    assert slow.breakdown["tp_comm"] == pytest.approx(base.breakdown["tp_comm"])  # network untouched


def test_calibrate_refuses_fewer_runs_than_constants(run_cli, tmp_path, cluster_file):
    rows = tmp_path / "one.json"
    rows.write_text("[]")
    code, out, err = run_cli("plan", "calibrate", "--runs", str(rows), "--cluster", str(cluster_file),
                             "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--runs" in err and "4 constants" in err
    assert not (tmp_path / "p.yaml").exists()
    code, _, err = run_cli("plan", "calibrate", "--runs", str(rows), "--cluster", str(cluster_file),
                           "--out", str(tmp_path / "p.yaml"), "--fit", "gemm,speed")
    assert code == 2 and "--fit" in err
