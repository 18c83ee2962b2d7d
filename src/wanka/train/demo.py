"""The training section of `make demo`: 2 processes train `tiny` on the shipped corpus under
torchrun, rank 1 is killed mid-run, torchrun restarts the job, it resumes from the last
checkpoint with the same data order, and the result is exported for the serving demo."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from wanka.data.prepare import default_data
from wanka.train.config import TrainConfig
from wanka.train.export import export
from wanka.train.runner import run_local

STEPS, KILL_STEP = 80, 47


def demo_dir() -> Path:
    """.wanka/demo/ in the repository root (git-ignored); the current directory outside a checkout."""
    root = Path(__file__).resolve().parents[3]
    return (root if (root / "pyproject.toml").is_file() else Path.cwd()) / ".wanka" / "demo"


def run() -> str:
    out = demo_dir()
    ckpt, export_dir = out / "train", out / "export"
    shutil.rmtree(ckpt, ignore_errors=True)
    data = default_data()
    cfg = TrainConfig(model="tiny", layout="dp=2,precision=fp32,gbs=8,mbs=4", steps=STEPS, ckpt=str(ckpt), ckpt_every=10,
                      async_ckpt=True, lr=3e-3, inject=[f"kill@step={KILL_STEP},rank=1"])
    start = time.perf_counter()
    result = run_local(cfg, data, nproc=2, max_restarts=2)
    took = time.perf_counter() - start
    metrics = [json.loads(l) for l in (ckpt / "metrics.jsonl").read_text().splitlines()]
    events = [json.loads(l) for l in (ckpt / "events.jsonl").read_text().splitlines()]
    restored = [e["step"] for e in events if e["event"] == "restored"]
    first = metrics[0]
    print(f"train: tiny (4 layers, hidden 128) on 2 processes, FSDP2 dp=2, {STEPS} steps of 8 x 128 tokens, torchrun + gloo")
    print(f"  loss {first['loss']:.2f} -> {result['final_loss']:.2f}; rank 1 SIGKILLed after step {KILL_STEP}; "
          f"torchrun restarted the job {result['restarts']} time(s); resumed from checkpoint step {restored}")
    print(f"  steps {KILL_STEP - (KILL_STEP % 10) + 1}-{KILL_STEP} were replayed on the same batches; "
          f"{statistics_line(metrics)}; {took:.0f} s wall incl. restart")
    info = export(ckpt, export_dir)
    print(f"  exported step {info['step']} -> {export_dir} (params_sha256 {info['params_sha256'][:16]}...)")
    return str(export_dir)


def statistics_line(metrics: list[dict]) -> str:
    tps = sorted(m["tokens_per_s"] for m in metrics)
    return f"median {tps[len(tps) // 2]:.0f} tokens/s"


if __name__ == "__main__":
    run()
