"""Fault injection (for tests and the demo) and fault detection (loss spikes, stragglers).

Injection spec: KIND@step=N[,rank=R] with KIND one of
    kill               SIGKILL rank R after step N (torchrun restarts the job)
    hang               rank R sleeps forever after step N (peers hit the collective timeout)
    nan                the loss of batch N becomes NaN on rank R (all ranks when rank is omitted)
    slow               rank R stalls at the end of step N's backward for 3x the previous step's time,
                       and at least 0.5 s (a straggler at any machine speed; see `Injector.slow`)
    corrupt-checkpoint flip bytes in checkpoint N right after it is committed
    kill-in-save       rank R dies after writing checkpoint N but before it is committed
kill, hang and kill-in-save fire once per run: the firing rank leaves a marker in CKPT/.inject/.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from wanka.errors import SpecError

KINDS = ("kill", "hang", "nan", "slow", "corrupt-checkpoint", "kill-in-save")


@dataclass(frozen=True)
class Injection:
    kind: str
    step: int
    rank: int | None = None

    @classmethod
    def parse(cls, text: str) -> "Injection":
        kind, _, rest = text.partition("@")
        if kind not in KINDS:
            raise SpecError("inject", f"KIND@step=N[,rank=R] with KIND in {' | '.join(KINDS)}", text)
        values = {}
        for item in filter(None, rest.split(",")):
            key, _, raw = item.partition("=")
            if key not in ("step", "rank") or not raw.isdigit():
                raise SpecError("inject", "step=N and optional rank=R with integers N, R >= 0", text)
            values[key] = int(raw)
        if "step" not in values:
            raise SpecError("inject", "a step, e.g. kill@step=30,rank=1", text)
        return cls(kind, values["step"], values.get("rank"))

    def __str__(self) -> str:
        return f"{self.kind}@step={self.step}" + ("" if self.rank is None else f",rank={self.rank}")

    def mine(self, rank: int) -> bool:
        return self.rank is None or self.rank == rank


class Injector:
    def __init__(self, injections: list[Injection], rank: int, world_size: int, marker_dir: Path, log):
        for inj in injections:
            if inj.rank is not None and inj.rank >= world_size:
                raise SpecError("inject", f"rank < world size ({world_size})", str(inj))
        self.injections, self.rank, self.marker_dir, self.log = injections, rank, marker_dir, log
        self._slow_base_s: float | None = None  # the step time the first stall was measured against

    def _fire_once(self, inj: Injection) -> bool:
        marker = self.marker_dir / f"{inj.kind}-{inj.step}-{inj.rank}"
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        with open(marker, "w") as f:
            f.write(str(time.time()))
            f.flush()
            os.fsync(f.fileno())
        return True

    def _matching(self, kind: str, step: int):
        return [i for i in self.injections if i.kind == kind and i.step == step and i.mine(self.rank)]

    def after_step(self, step: int) -> None:
        for inj in self._matching("kill", step):
            if self._fire_once(inj):
                self.log({"event": "inject", "what": str(inj)})
                os.kill(os.getpid(), signal.SIGKILL)
        for inj in self._matching("hang", step):
            if self._fire_once(inj):
                self.log({"event": "inject", "what": str(inj)})
                while True:
                    time.sleep(3600)

    def slow(self, step: int, reference_s: float) -> None:
        """Stall for 3x `reference_s` (the previous step's measured time; for the first step, this
        step's time so far), and at least 0.5 s.

        Relative to the measured step, so the stalled rank is about 4x as busy as its peers on any
        machine (the detector's default threshold is 1.5x), and at least 0.5 s so that the step also
        passes the detector's 0.3 s floor for two ranks (trainer.train_step). Consecutive stalls keep
        the first one's reference: a stalled step is no reference, or stalls would compound (4x per
        step) until the control plane's hang rule fired.
        """
        for _ in self._matching("slow", step):
            base = reference_s if self._slow_base_s is None else min(reference_s, self._slow_base_s)
            self._slow_base_s = base
            time.sleep(max(0.5, 3.0 * base))

    def nan(self, batch_index: int) -> bool:
        return bool(self._matching("nan", batch_index))

    def in_save(self, step: int, tmp: Path) -> None:
        for inj in self._matching("kill-in-save", step):
            if self._fire_once(inj):
                self.log({"event": "inject", "what": str(inj), "tmp": str(tmp)})
                os.kill(os.getpid(), signal.SIGKILL)

    def after_commit(self, step: int, path: Path) -> None:
        for inj in self._matching("corrupt-checkpoint", step):
            if self.rank == 0 and self._fire_once(inj):
                victim = sorted(path.glob("*.distcp"))[0]
                data = bytearray(victim.read_bytes())
                data[len(data) // 2] ^= 0xFF
                victim.write_bytes(bytes(data))
                self.log({"event": "inject", "what": str(inj), "file": str(victim)})


class SpikeDetector:
    """NaN/inf, or loss > factor x EMA of past losses after `warmup` steps (PaLM, arXiv:2204.02311
    section 5.1, rolled back ~100 steps and skipped 200-500 batches around each spike)."""

    def __init__(self, factor: float = 3.0, warmup: int = 5, beta: float = 0.9):
        self.factor, self.warmup, self.beta = factor, warmup, beta
        self.ema: float | None = None
        self.seen = 0

    def is_bad(self, loss: float) -> str | None:
        if loss != loss or loss in (float("inf"), float("-inf")):
            return "non-finite loss"
        if self.ema is not None and self.seen >= self.warmup and loss > self.factor * self.ema:
            return f"loss spike {loss:.3f} > {self.factor} x EMA {self.ema:.3f}"
        return None

    def update(self, loss: float) -> None:
        self.ema = loss if self.ema is None else self.beta * self.ema + (1 - self.beta) * loss
        self.seen += 1

    def state(self) -> dict:
        return {"ema": self.ema, "seen": self.seen}

    def load(self, d: dict) -> None:
        self.ema, self.seen = d.get("ema"), int(d.get("seen", 0))


def stragglers(step_times_s: list[float], factor: float = 1.5) -> list[int]:
    """Ranks whose (busy) step time exceeds factor x the median of the other ranks (a slow GPU, NIC or
    host). Busy time excludes waiting for peers at the step's loss all-reduce; slowness inside
    FSDP's own collectives is charged to every rank (per-kernel CUDA timing would separate it)."""
    import statistics

    if len(step_times_s) < 2:
        return []
    out = []
    for r, t in enumerate(step_times_s):
        others = statistics.median(step_times_s[:r] + step_times_s[r + 1 :])  # the median of the *other* ranks
        if others > 0 and t > factor * others:
            out.append(r)
    return out
