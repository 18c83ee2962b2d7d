"""What the supervisor reads of a running job: its trainer's metrics.jsonl (one line per step, rank 0;
src/wanka/train/metrics.py) and the last error line of a launch's log."""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

_TAIL_BYTES = 64 * 1024  # read at most this much of a file's end: bounded work per poll


def _tail(path: Path, limit: int = _TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Progress:
    last_step: int | None
    last_step_at: float | None    # mtime of metrics.jsonl: when rank 0 wrote its last step
    median_step_s: float | None   # over the last (up to) 50 steps
    last_loss: float | None
    tokens_per_s: float | None


def progress(ckpt: str) -> Progress:
    path = Path(ckpt) / "metrics.jsonl"
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return Progress(None, None, None, None, None)
    records = []
    for line in _tail(path).splitlines()[-50:]:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the first line of a tail may be cut; the last may be half-written
    if not records:
        return Progress(None, mtime, None, None, None)
    last = records[-1]
    times = [r["step_time_s"] for r in records if isinstance(r.get("step_time_s"), (int, float))]
    return Progress(last.get("step"), mtime, statistics.median(times) if times else None, last.get("loss"),
                    last.get("tokens_per_s"))


def last_error(log: Path) -> str:
    """The line naming why a launch failed (the workers' own exception lines first, as runner.py does)."""
    lines = _tail(log).strip().splitlines()
    for pattern in (r"^\[rank\d+\]:\s*[\w.]*(Error|Exception)\b", r"wanka: error: ", r"exitcode\s*:\s*-?\d+", r"Error"):
        hits = [l for l in lines if re.search(pattern, l)]
        if hits:
            return hits[-1].strip()[-300:]
    return (lines[-1].strip()[-300:] if lines else "no output")


def newest_checkpoint_step(ckpt: str) -> int | None:
    from wanka.train.checkpoint import latest_valid

    found = latest_valid(Path(ckpt), log=lambda _: None)
    return None if found is None else found[0]


def spike_events(ckpt: str) -> list[dict]:
    """The trainer's loss_spike events (events.jsonl, rank 0; one per in-process rollback), oldest first."""
    return trainer_events(ckpt, "loss_spike")


def straggler_events(ckpt: str) -> list[dict]:
    """The trainer's straggler events (one per step with a rank whose busy time > straggler_factor x the
    other ranks' median; src/wanka/train/fault.py `stragglers`), oldest first."""
    return trainer_events(ckpt, "straggler")


def recent_tokens_per_s(ckpt: str, steps: int) -> tuple[float, int] | None:
    """(median tokens/s, steps) over the last `steps` lines of metrics.jsonl; None with fewer lines."""
    values = []
    for line in _tail(Path(ckpt) / "metrics.jsonl").splitlines()[-steps:]:
        try:
            v = json.loads(line).get("tokens_per_s")
        except json.JSONDecodeError:
            continue
        if isinstance(v, (int, float)):
            values.append(float(v))
    return (statistics.median(values), len(values)) if len(values) >= steps else None


def trainer_events(ckpt: str, kind: str) -> list[dict]:
    """The trainer's events of one kind (events.jsonl, rank 0), oldest first."""
    out = []
    try:
        with open(Path(ckpt) / "events.jsonl") as f:
            for line in f:
                if f'"{kind}"' not in line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                if event.get("event") == kind:
                    out.append(event)
    except OSError:
        pass
    return out
