"""`wanka sched replay|compare`: JSON shapes, HTML report, and one-line errors with exit code 2."""

import json

from wanka.cli import main

BASE = ["--trace", "philly", "--cluster", "wanka-10k", "--gpus", "256", "--limit", "400"]


def test_replay_json(capsys):
    assert main(["sched", "replay", *BASE, "--policy", "first-fit/sjf", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["policy"] == "first-fit/sjf" and row["jobs"] == 400 and row["finished"] == 400
    assert row["skipped_rows"] == 0


def test_compare_json_and_report(capsys, tmp_path):
    report = tmp_path / "r.html"
    assert main(["sched", "compare", *BASE, "--policies", "first-fit,topo-bestfit/sjf", "--json",
                 "--report", str(report)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["first-fit", "topo-bestfit/sjf"]
    for r in rows:
        for key in ("mean_jct_s", "p95_jct_s", "utilization", "minimal_spread_share", "fragmentation"):
            assert key in r
    text = report.read_text()
    assert text.startswith("<!doctype html>") and text.count("data:image/png;base64,") == 6


def test_synthetic_with_quotas(capsys):
    assert main(["sched", "replay", "--trace", "synthetic", "--jobs", "200", "--seed", "3", "--gpus", "4096",
                 "--quotas", "pretrain=2048,finetune=1536,eval=512", "--policy", "topo-bestfit/priority",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert set(row["tenants"]) <= {"pretrain", "finetune", "eval"} and row["finished"] == 200


def bad(capsys, argv, field):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err, err


def test_bad_inputs_exit_2_with_one_line(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,duration,num_gpus\n2017-10-01 00:00:00,10,1\n")
    small = ["--trace", str(trace), "--gpus", "64"]
    bad(capsys, ["sched", "replay", *small, "--policy", "worst-fit"], "policy")
    bad(capsys, ["sched", "replay", *small, "--policy", "first-fit/lifo"], "policy")
    bad(capsys, ["sched", "replay", "--trace", "nope.csv"], "--trace")
    bad(capsys, ["sched", "replay", *small, "--scale", "0"], "--scale")
    bad(capsys, ["sched", "replay", *small, "--quotas", "a=x"], "--quotas")
    bad(capsys, ["sched", "replay", *small, "--gpus", "0"], "--gpus")
    bad(capsys, ["sched", "compare", *small, "--policies", ","], "--policies")
    bad(capsys, ["sched", "replay", "--trace", "synthetic", "--jobs", "0"], "--jobs")
    trace.write_text("timestamp,duration,num_gpus\n2017-10-01 00:00:00,10,1\n2017-10-01 00:00:01,x,1\n")
    bad(capsys, ["sched", "replay", "--trace", str(trace), "--gpus", "64"], "line 3: duration")
    trace.write_text("timestamp,duration,num_gpus\n2017-10-01 00:00:00,10,1\n2017-10-01 00:00:01,10,128\n")
    bad(capsys, ["sched", "replay", "--trace", str(trace), "--gpus", "64"], "line 3: num_gpus")
    assert main(["sched", "replay", "--trace", str(trace), "--gpus", "64", "--skip-bad-rows", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["skipped_rows"] == 1 and row["skipped"] == {"num_gpus larger than the cluster": 1}
