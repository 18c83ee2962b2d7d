"""Checkpoint interval formulas and the checkpoint schedule the twin runs.

Young (1974), CACM 17(9):   tau = sqrt(2 delta M)
Daly (2006), FGCS 22(3):303-312, exactly as reliability.md section 3.2:
    T_w(tau) = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau           expected wall time
    tau_opt  = sqrt(2 delta M) [1 + 1/3 sqrt(delta/(2M)) + 1/9 (delta/(2M))] - delta   (delta < 2M)
    tau_opt  = M                                                                        (delta >= 2M)
delta is the blocking (stall) time of one checkpoint, M the MTBF of the failures that roll back to
this checkpoint, tau the compute time between checkpoints. Units: any, as long as they agree.

Schedule (`CheckpointSchedule`): the job computes tau seconds, stalls `stall_s` to take a snapshot,
and repeats. With a memory level, every snapshot goes to host/peer memory (durable `mem_lag_s`
after its stall) and every `every`-th is also persisted to storage (extra stall `extra_stall_s`
when storage writes are synchronous, durable `sto_lag_s` after the stall when asynchronous).
Without a memory level, every snapshot is a storage checkpoint (every = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval(delta: float, mtbf: float) -> float:
    """Young 1974: tau = sqrt(2 delta M)."""
    return math.sqrt(2.0 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly 2006 perturbation solution for the optimum compute time between checkpoints."""
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def daly_wall_time(tau: float, delta: float, mtbf: float, restart: float, solve_time: float) -> float:
    """Daly 2006 expected wall-clock time to finish `solve_time` of work (exponential failures)."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf) * solve_time / tau


def daly_exact_interval(delta: float, mtbf: float, restart: float = 0.0) -> float:
    """Argmin over tau of Daly's T_w (golden-section search on a log scale; T_w is unimodal)."""
    lo, hi = math.log(1e-6 * mtbf + 1e-12), math.log(20.0 * mtbf)
    f = lambda u: daly_wall_time(math.exp(u), delta, mtbf, restart, 1.0)  # noqa: E731
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(200):
        if f(c) < f(d):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    return math.exp((a + b) / 2.0)


def interval_for(policy: str, delta: float, mtbf: float, fixed: float | None = None) -> float:
    """The compute time between checkpoints for policy fixed | young | daly."""
    if policy == "fixed":
        assert fixed is not None
        return fixed
    if not math.isfinite(mtbf):
        return float("inf")
    if delta <= 0:
        raise ValueError("young/daly need a positive checkpoint stall")
    return young_interval(delta, mtbf) if policy == "young" else daly_interval(delta, mtbf)


@dataclass(frozen=True)
class CheckpointSchedule:
    """Compiled checkpoint cadence for one job (seconds)."""

    tau_s: float  # compute seconds between snapshots
    stall_s: float  # stall of every snapshot
    every: int = 1  # every k-th snapshot is also a storage checkpoint
    extra_stall_s: float = 0.0  # extra stall at storage checkpoints (synchronous storage behind memory)
    mem_lag_s: float = 0.0  # snapshot durable in memory this long after its stall ends
    sto_lag_s: float = 0.0  # storage checkpoint durable this long after its stall ends
    has_memory: bool = False

    @property
    def cycle_s(self) -> float:
        return self.tau_s + self.stall_s

    @property
    def super_cycle_s(self) -> float:
        return self.every * self.cycle_s + self.extra_stall_s

    def compute_done(self, elapsed: float) -> float:
        """Compute seconds done after `elapsed` wall seconds of a segment that started with compute."""
        if not math.isfinite(self.tau_s):
            return elapsed
        q, r = divmod(elapsed, self.super_cycle_s)
        j = min(int(r // self.cycle_s), self.every - 1)
        return (q * self.every + j) * self.tau_s + min(r - j * self.cycle_s, self.tau_s)

    def wall_for_compute(self, compute: float) -> float:
        """Wall seconds into a segment at which `compute` seconds of compute are done (inverse of
        compute_done; a snapshot due exactly at the end is not waited for)."""
        if not math.isfinite(self.tau_s) or compute <= 0:
            return max(compute, 0.0)
        per_super = self.every * self.tau_s
        q, rem = divmod(compute, per_super)
        if rem == 0:
            return q * self.super_cycle_s - self.stall_s - self.extra_stall_s
        j, r = divmod(rem, self.tau_s)
        if r == 0:
            return q * self.super_cycle_s + j * self.cycle_s - self.stall_s
        return q * self.super_cycle_s + j * self.cycle_s + r

    def snapshots_ended(self, elapsed: float) -> int:
        """Snapshots whose stall has ended by `elapsed` wall seconds into the segment."""
        if elapsed < 0 or not math.isfinite(self.tau_s):
            return 0
        q, r = divmod(elapsed, self.super_cycle_s)
        return int(q) * self.every + min(int(r // self.cycle_s), self.every - 1)

    def durable(self, elapsed: float) -> tuple[float, float]:
        """(memory, storage) compute seconds saved durably after `elapsed` wall seconds."""
        if not math.isfinite(self.tau_s):
            return 0.0, 0.0
        e_sto = elapsed - self.sto_lag_s
        sto = math.floor(e_sto / self.super_cycle_s) * self.every * self.tau_s if e_sto >= 0 else 0.0
        mem = self.snapshots_ended(elapsed - self.mem_lag_s) * self.tau_s if self.has_memory else sto
        return mem, sto
