"""Parity (fp32, fixed seed, same global batch): the 10-step loss of every layout equals the
1-process loss within 1e-4 relative; and a checkpoint saved by 4 ranks resumes on 2.

Two torchrun launches (2 and 4 processes) run several layouts each, since a launch costs 8-19 s.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from wanka.train.config import TrainConfig
from wanka.train.trainer import Trainer

WORKER = Path(__file__).with_name("dist_worker.py")
COMMON = {"model": "tiny", "steps": 10, "seq_len": 64, "ckpt_every": 5}
RTOL = 1e-4


def _launch(nproc: int, out: Path, data: Path, configs: list[dict]) -> list[dict]:
    """One torchrun launch of `configs`. A launch whose worker died of SIGSEGV inside torch/gloo is run once
    more from the same starting checkpoints: on 2026-12-04 a gloo worker of these launches segfaulted in two
    of three full-suite runs (once with 4 ranks, once with 2; not reproduced in 6 isolated launches of the
    2-rank set), a crash below this project's code. Any other failure -- and a second crash -- fails at once;
    the parity assertions are the same either way. PYTHONFAULTHANDLER prints the crashing rank's stack."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(WORKER),
           str(out), str(data)] + [json.dumps({**COMMON, **c}) for c in configs]
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    dirs = [Path(c["ckpt"]) for c in configs]
    before = {d: d.with_name(d.name + ".before") for d in dirs if d.exists()}
    for d, copy in before.items():
        shutil.copytree(d, copy)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    if proc.returncode != 0 and "SIGSEGV" in proc.stderr:
        warnings.warn("a torchrun worker died of SIGSEGV; relaunching once:\n" + proc.stderr[-2000:])
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
            if d in before:
                shutil.copytree(before[d], d)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())["runs"]


@pytest.fixture(scope="module")
def reference(corpus_dir, tmp_path_factory):
    cfg = TrainConfig(**COMMON, layout="precision=fp32,gbs=4,mbs=2", ckpt=str(tmp_path_factory.mktemp("ref")))
    trainer = Trainer(cfg, 0, 1, corpus_dir)
    trainer.fit()
    return trainer.losses, _grad_norms(cfg.ckpt)


def _grad_norms(ckpt) -> list[float]:
    lines = (Path(ckpt) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(l)["grad_norm"] for l in lines]


def _check(run, reference):
    losses, norms = reference
    layout = run["config"]["layout"]
    assert len(run["losses"]) == 10, layout
    assert run["losses"][0] == pytest.approx(losses[0], rel=RTOL), layout
    assert run["losses"][-1] == pytest.approx(losses[-1], rel=RTOL), layout
    # the global grad norm (sharded, partial and replicated grads alike) matches too
    assert _grad_norms(run["config"]["ckpt"]) == pytest.approx(norms, rel=1e-4), layout


@pytest.fixture(scope="module")
def four_proc(corpus_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("p4")
    configs = [
        {"layout": "dp=2,tp=2,precision=fp32,gbs=4,mbs=2", "ckpt": str(root / "dp2tp2")},
        {"layout": "pp=2,dp=2,precision=fp32,gbs=4,mbs=1", "ckpt": str(root / "pp2dp2"), "pp_schedule": "gpipe"},
        {"layout": "pp=2,vpp=2,dp=2,precision=fp32,gbs=4,mbs=1", "ckpt": str(root / "interleaved")},
        {"layout": "dp=4,dp_shard=2,precision=fp32,gbs=4,mbs=1", "ckpt": str(root / "hsdp"), "replica_check_every": 5},
    ]
    return root, _launch(4, root / "out.json", corpus_dir, configs)


@pytest.mark.timeout(300)
def test_four_process_layouts_match_one_process(reference, four_proc):
    root, runs = four_proc
    for run in runs:
        _check(run, reference)
    events = [json.loads(l) for l in (root / "hsdp" / "events.jsonl").read_text().splitlines()]
    checks = [e for e in events if e["event"] == "replica_check"]
    assert len(checks) == 2 and all(c["ok"] for c in checks)


@pytest.mark.timeout(300)
def test_two_process_layouts_match_and_resume_from_four(reference, four_proc, corpus_dir, tmp_path):
    root, _ = four_proc
    resume_dir = tmp_path / "resume"
    shutil.copytree(root / "dp2tp2", resume_dir)
    shutil.rmtree(resume_dir / "step_00000010")  # resume the 4-rank dp2 x tp2 run at step 5 on 2 ranks
    configs = [
        {"layout": "dp=2,precision=fp32,gbs=4,mbs=2", "ckpt": str(tmp_path / "dp2")},
        {"layout": "tp=2,precision=fp32,gbs=4,mbs=2", "ckpt": str(tmp_path / "tp2")},
        {"layout": "pp=2,precision=fp32,gbs=4,mbs=1", "ckpt": str(tmp_path / "pp2")},
        {"layout": "dp=2,precision=fp32,gbs=4,mbs=2", "ckpt": str(resume_dir)},
        {"layout": "dp=2,precision=fp32,gbs=4,mbs=2", "ckpt": str(tmp_path / "moe"), "model": "tiny-moe", "steps": 4},
        {"layout": "tp=2,recompute=full,precision=fp32,gbs=4,mbs=2", "ckpt": str(tmp_path / "ac"), "steps": 4},
        {"layout": "dp=2,precision=bf16,gbs=4,mbs=2", "ckpt": str(tmp_path / "bf16"), "steps": 4},
        {"layout": "pp=2,precision=fp32,gbs=4,mbs=1", "ckpt": str(tmp_path / "moe_pp2"), "model": "tiny-moe",
         "steps": 4},
    ]
    runs = _launch(2, tmp_path / "out.json", corpus_dir, configs)
    for run in runs[:3]:
        _check(run, reference)
    resumed = runs[3]["losses"]
    assert len(resumed) == 5  # steps 6..10 only: it loaded step 5 written by 4 ranks
    assert resumed == pytest.approx(reference[0][5:], rel=RTOL)
    moe_cfg = TrainConfig(**{**COMMON, "model": "tiny-moe", "steps": 4}, layout="precision=fp32,gbs=4,mbs=2",
                          ckpt=str(tmp_path / "moe1"))
    moe_one = Trainer(moe_cfg, 0, 1, corpus_dir)
    moe_one.fit()
    assert runs[4]["losses"] == pytest.approx(moe_one.losses, rel=RTOL)  # MoE (+ balancing loss) under FSDP2
    assert runs[5]["losses"] == pytest.approx(reference[0][:4], rel=RTOL)  # activation checkpointing is exact
    # bf16 compute with fp32 master weights and fp32 gradient reduction: close, not equal
    assert runs[6]["losses"] == pytest.approx(reference[0][:4], rel=2e-2)
    assert runs[6]["losses"] != pytest.approx(reference[0][:4], rel=1e-6)
    # MoE under pipeline parallelism: the balancing loss of the first stage's MoE layers reaches
    # their routers without passing through the last stage's loss (grad norms include the routers)
    moe_mb1 = TrainConfig(**{**COMMON, "model": "tiny-moe", "steps": 4}, layout="precision=fp32,gbs=4,mbs=1",
                          ckpt=str(tmp_path / "moe_mb1"))
    one = Trainer(moe_mb1, 0, 1, corpus_dir)
    one.fit()
    assert runs[7]["losses"] == pytest.approx(one.losses, rel=RTOL)
    assert _grad_norms(runs[7]["config"]["ckpt"]) == pytest.approx(_grad_norms(moe_mb1.ckpt), rel=1e-4)
