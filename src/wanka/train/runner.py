"""Start a local torchrun for `wanka train` and follow it: progress bar, restarts, result."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from wanka.errors import SpecError
from wanka.train.config import TrainConfig


def torchrun_cmd(nproc: int, max_restarts: int, config_file: Path, data: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", "--monitor-interval=0.5",
            "-m", "wanka.train.main", "--config", str(config_file), "--data", str(data)]


def run_local(cfg: TrainConfig, data: Path, nproc: int, max_restarts: int, progress: bool = False) -> dict:
    """Run cfg under torchrun with nproc workers; returns rank 0's result.json plus log paths."""
    ckpt = Path(cfg.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    config_file = ckpt / "run.json"
    config_file.write_text(json.dumps(cfg.to_dict(), indent=2))
    result_file = ckpt / "result.json"
    result_file.unlink(missing_ok=True)
    log_file = ckpt / "torchrun.log"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(log_file, "w") as log:
        proc = subprocess.Popen(torchrun_cmd(nproc, max_restarts, config_file, data), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            with _sigterm_as_interrupt():
                if progress:
                    _follow(proc, ckpt / "metrics.jsonl", cfg.steps)
                rc = proc.wait()
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (kill, scancel): stop torchrun and its workers too
            _stop(proc)
            raise
    if rc != 0 or not result_file.is_file():
        lines = log_file.read_text().strip().splitlines()
        # the workers' own exception lines ("[rank0]: IndexError: ...") name the cause; torchrun's
        # closing ChildFailedError only says that a child failed
        causes = [l for l in lines if re.match(r"^\[rank\d+\]:\s*[\w.]*(Error|Exception)\b", l)]
        errors = causes or [l for l in lines if "Error" in l]
        errors += [l.split("wanka: error: ", 1)[1] for l in lines if "wanka: error: " in l]
        raise TrainingFailed(rc, log_file, (errors or lines or [""])[-1])
    result = json.loads(result_file.read_text())
    result.update({"ckpt": str(ckpt), "log": str(log_file), "metrics": str(ckpt / "metrics.jsonl"),
                   "events": str(ckpt / "events.jsonl")})
    return result


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """torchrun runs in its own session (so a terminal's Ctrl-C reaches only us); without this, a
    SIGTERM to `wanka train` ended it and left torchrun and every worker training on, orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM torchrun (its agent stops the workers), then SIGKILL the whole session if it lingers."""
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class TrainingFailed(SpecError):
    def __init__(self, rc: int, log: Path, tail: str):
        super().__init__("train", f"torchrun to exit 0 (see {log})", f"exit {rc}: {tail[-200:]}")


def _follow(proc: subprocess.Popen, metrics: Path, steps: int) -> None:
    """A rich progress bar on stderr driven by metrics.jsonl (rank 0 writes one line per step)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    pos = metrics.stat().st_size if metrics.exists() else 0
    with Progress(TextColumn("train"), BarColumn(), TextColumn("{task.completed}/{task.total} {task.fields[info]}"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("train", total=steps, info="")
        while proc.poll() is None:
            time.sleep(0.3)
            if not metrics.exists():
                continue
            with open(metrics) as f:
                f.seek(pos)
                chunk = f.read()
            if not chunk.endswith("\n"):
                chunk = chunk[: chunk.rfind("\n") + 1]
            pos += len(chunk.encode())
            for line in chunk.splitlines():
                rec = json.loads(line)
                bar.update(task, completed=rec["step"], info=f"loss {rec['loss']:.3f}  {rec['tokens_per_s']:.0f} tok/s")
