"""CLI validation (exit 2, one line), `wanka data prepare`, and `wanka launch` golden files."""

from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("golden")


@pytest.mark.parametrize("args, field", [
    (["--layout", "tp=3", "--nproc", "3"], "layout.tp"),
    (["--layout", "dp=2", "--nproc", "3"], "layout"),
    (["--layout", "cp=2,tp=2", "--nproc", "4"], "layout.tp"),
    (["--model", "tiny-moe", "--layout", "cp=2", "--nproc", "2"], "layout.cp"),
    (["--moe-bias-rate", "0.1"], "model"),
    (["--model", "tiny-moe", "--moe-redundant-experts", "2"], "moe-redundant-experts"),
    (["--model", "tiny-moe", "--layout", "ep=2", "--nproc", "2", "--moe-redundant-experts", "1"],
     "moe-redundant-experts"),
    (["--model", "tiny-moe", "--moe-capacity-factor", "-1"], "moe-capacity-factor"),
    (["--layout", "dp=2", "--nproc", "2", "--grad-compression", "powersgd"], "grad-compression"),
    (["--layout", "bogus=1"], "layout.bogus"),
    (["--nproc", "0"], "nproc"),
    (["--steps", "0"], "steps"),
    (["--inject", "kill@step=1,rank=5", "--nproc", "2"], "inject"),
    (["--model", "no-such-model"], "model"),
    (["--layout", "precision=fp8"], "layout.precision"),
    (["--layout", "pp=2,gbs=1", "--nproc", "2"], "layout.gbs"),
    (["--layout", "pp=2,gbs=4", "--nproc", "2", "--pp-schedule", "interleaved"], "pp-schedule"),
    (["--model", "tiny-moe", "--layout", "tp=2", "--nproc", "2"], "layout.tp"),
])
def test_train_rejects_bad_input_with_one_line(run_cli, corpus_dir, tmp_path, args, field):
    code, out, err = run_cli("train", "--data", str(corpus_dir), "--ckpt", str(tmp_path / "c"), "--steps", "2", *args)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_train_rejects_bad_data_and_ckpt(run_cli, tmp_path):
    code, _, err = run_cli("train", "--data", str(tmp_path), "--ckpt", str(tmp_path / "c"))
    assert code == 2 and "data" in err
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli("train", "--ckpt", str(tmp_path / "file"))
    assert code == 2 and "ckpt" in err


def test_export_rejects_missing_checkpoint(run_cli, tmp_path):
    code, _, err = run_cli("export", "--ckpt", str(tmp_path), "--out", str(tmp_path / "o"))
    assert code == 2 and err.startswith("wanka: error: ckpt")


def test_data_prepare(run_json, tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    out = run_json("data", "prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "d"), "--min-chars", "1")
    assert out["tokens"] == 6 and out["shards"] == 1


@pytest.mark.parametrize("target, extra, golden", [
    ("slurm", ["--switches", "2@01:00:00", "--partition", "train"], "slurm_llama3-8b_4nodes.sbatch"),
    ("k8s", ["--topology", "cloud.google.com/gce-topology-block", "--queue", "team-a", "--pvc", "team-a-shared"],
     "k8s_llama3-8b_4nodes.yaml"),
])
def test_launch_matches_golden(run_cli, tmp_path, target, extra, golden):
    out = tmp_path / golden
    code, _, err = run_cli("launch", target, "--model", "llama3-8b", "--layout", "tp=8,pp=2,gbs=64", "--nodes", "4",
                           "--out", str(out), *extra)
    assert code == 0, err
    assert out.read_text() == (GOLDEN / golden).read_text()


def test_launch_validates_layout_against_nodes(run_cli):
    code, _, err = run_cli("launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8,pp=3", "--nodes", "4")
    assert code == 2 and "layout" in err
    code, _, err = run_cli("launch", "k8s", "--layout", "dp=2", "--nodes", "0")
    assert code == 2 and "nodes" in err


@pytest.mark.parametrize("layout", ["dp=8,ep=2,precision=fp32,gbs=8,mbs=1", "pp=2,dp=4,ep=2,precision=fp32,gbs=8,mbs=1",
                                    "dp=4,cp=2,precision=fp32,gbs=8,mbs=2", "dp=8,zero=0,precision=fp32,gbs=8,mbs=1"])
def test_plan_prices_the_layouts_train_runs(run_json, layout):
    """The ep/cp layout strings `wanka train` runs are the planner's too (same Layout parser)."""
    model = "tiny" if "cp=" in layout or "zero=0" in layout else "tiny-moe"
    out = run_json("plan", "--model", model, "--cluster", "meta-24k-h100", "--gpus", "8", "--layout", layout)
    for key in ("ep=2", "cp=2", "zero=0"):
        if key in layout:
            assert key in out["layout"]
    assert out["step_time_s"] > 0
    if "ep=2" in layout:
        assert out["breakdown"]["ep_comm"] > 0  # the all-to-all is priced
    if "cp=2" in layout:
        assert out["breakdown"]["cp_comm"] > 0
