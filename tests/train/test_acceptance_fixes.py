"""Regressions found in acceptance testing: export is all-or-nothing and readable, a checkpoint
dir of another model is refused before torchrun starts, a failed run names the workers' own
exception, and `wanka launch` validates what it writes into job files."""

import json
import os

import pytest

from wanka.errors import SpecError
from wanka.train.checkpoint import check_ckpt_dir
from wanka.train.config import TrainConfig
from wanka.train.export import export
from wanka.train.runner import TrainingFailed
from wanka.train.trainer import Trainer
from wanka.workload.spec import load_model

BASE = dict(model="tiny", layout="precision=fp32,gbs=2,mbs=1", seq_len=32, ckpt_every=1, steps=1)


@pytest.fixture(scope="module")
def ckpt(corpus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ck")
    Trainer(TrainConfig(**{**BASE, "ckpt": str(root)}), 0, 1, corpus_dir).fit()
    return root


def test_failed_export_leaves_nothing_and_names_out(ckpt, tmp_path, run_cli):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli("export", "--ckpt", str(ckpt), "--out", str(tmp_path / "file" / "exp"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1
    code, _, err = run_cli("export", "--ckpt", str(ckpt), "--out", str(ckpt / "step_00000001" / "exp"))
    assert code == 2 and err.startswith("wanka: error: out:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no temp dir left behind


def test_export_is_readable_and_replaces_an_old_one(ckpt, tmp_path):
    out = tmp_path / "exp"
    out.mkdir()
    (out / "config.json").write_text("{old}")
    export(ckpt, out)
    assert json.loads((out / "config.json").read_text())["step"] == 1
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["exp"]


def test_ckpt_dir_of_another_model_is_refused_up_front(ckpt):
    check_ckpt_dir(ckpt, load_model("tiny", seq_len=64))  # same architecture: resumable
    with pytest.raises(SpecError, match="moe") as info:
        check_ckpt_dir(ckpt, load_model("tiny-moe"))
    assert info.value.field == "ckpt"


def test_training_failure_names_the_worker_exception(tmp_path, monkeypatch):
    import subprocess

    from wanka.train import runner

    log = "\n".join(["[rank0]: Traceback (most recent call last):", "[rank0]: IndexError: index out of range in self",
                     "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "  x"])

    class FakeProc:
        def __init__(self, cmd, stdout, **kw):
            stdout.write(log)

        def wait(self):
            return 1

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    with pytest.raises(TrainingFailed, match="IndexError: index out of range"):
        runner.run_local(TrainConfig(model="tiny", ckpt=str(tmp_path)), tmp_path, 1, 0)


@pytest.mark.parametrize("extra, field", [
    (["--name", "x; rm -rf /"], "name"),
    (["--name", "Bad_Name"], "name"),
    (["--switches", "two"], "switches"),
    (["--segment", "9"], "segment"),
    (["--queue", "a: b"], "queue"),
    (["--out", "/proc/no/such/file"], "out"),
])
def test_launch_rejects_unsafe_or_malformed_flags(run_cli, extra, field):
    code, out, err = run_cli("launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4", *extra)
    assert code == 2 and err.startswith(f"wanka: error: {field}:") and err.count("\n") == 1 and out == ""


def test_launch_quotes_paths_and_allows_fp8_for_gpus(run_cli, tmp_path):
    code, out, err = run_cli("launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8,precision=fp8",
                             "--nodes", "4", "--data-dir", "/data with space")
    assert code == 0, err
    assert "--data '/data with space'" in out and "precision=fp8" in out


def test_data_prepare_into_a_file_exits_2(run_cli, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = run_cli("data", "prepare", "--out", str(tmp_path / "f"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1
    code, _, err = run_cli("data", "prepare", "--out", str(tmp_path / "f" / "sub"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1


def test_sigterm_to_wanka_train_stops_torchrun(tmp_path, monkeypatch):
    """SIGTERM (kill, scancel) used to end `wanka train` and leave torchrun and its workers running."""
    import signal
    import subprocess
    import sys
    import threading

    from wanka.train import runner

    started = []
    real_popen = subprocess.Popen

    def popen(cmd, **kw):
        proc = real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
        started.append(proc)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            runner.run_local(TrainConfig(model="tiny", ckpt=str(tmp_path)), tmp_path, 1, 0)
    finally:
        timer.cancel()
    assert started and started[0].poll() is not None  # the stand-in for torchrun was stopped
    assert signal.getsignal(signal.SIGTERM) == before  # our handler is only installed while torchrun runs
