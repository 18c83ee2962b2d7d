"""CLI validation (exit 2, one line), `wanka data prepare`, and `wanka launch` golden files."""

from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("golden")


@pytest.mark.parametrize("args, field", [
    (["--layout", "tp=3", "--nproc", "3"], "layout.tp"),
    (["--layout", "dp=2", "--nproc", "3"], "layout"),
    (["--layout", "cp=2", "--nproc", "2"], "layout.cp"),
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
