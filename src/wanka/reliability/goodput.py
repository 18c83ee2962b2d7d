"""Expected goodput of a whole training run: useful compute time / wall-clock time, once failures,
checkpoint stalls, restarts and lost work are paid (docs/reliability.md "Expected goodput").

Closed form (exponential failures, one checkpoint level), Daly 2006, FGCS 22(3):303-312, the same
T_w as `wanka.reliability.checkpoint.daly_wall_time`:
    T_w / T_s = M e^{R/M} (e^{(tau+delta)/M} - 1) / tau        goodput = T_s / T_w
with M the job's mean time between failures (the failure model's rates for the job's GPUs and
nodes), delta the blocking time of one checkpoint, R the time from a failure to computing again
(detection, restart, restore) and tau the compute time between checkpoints (Daly's optimum unless
given). To first order this is 1 - delta/tau - (tau/2 + delta + R)/M, the waste model of
reliability.md section 3.2.

The twin (wanka.sim) draws the same failures event by event; this is its closed-form mean for one
job with full restarts, which the planner uses to price a whole run (plan/run_level.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wanka.reliability.checkpoint import daly_interval, daly_wall_time
from wanka.reliability.failures import FailureModel

# Recovery seconds of a failure with automated restarts, as the twin's defaults
# (wanka.sim.scenario.RecoverySpec): detection ~60 s, ByteRobust section 2.2 [P]; re-initialise on
# the same nodes 300 s, the lower end of Meta RSC's u0 = 5-20 min (Kokolis et al. 2024) [Q].
DETECT_S = 60.0
RESTART_S = 300.0
# A failure that needs a person (FailureModel.manual_fraction: OPT-175B's 35 manual of ~105 restarts,
# Llama 3's 3 of 419) adds a diagnosis time: 2 h is a guess [G], the twin's manual_s default.
MANUAL_S = 7200.0


@dataclass(frozen=True)
class RunGoodput:
    """The expected goodput of one job and the quantities it came from (seconds unless named)."""

    goodput: float  # useful compute time / wall-clock time, in (0, 1]
    mtbf_h: float  # job MTBF from the failure model
    checkpoint_s: float  # delta: blocking time of one checkpoint
    interval_s: float  # tau: compute time between checkpoints
    recovery_s: float  # R: mean time from a failure to computing again (restore included)
    failure_model: str

    def as_dict(self) -> dict:
        return {"goodput": round(self.goodput, 4), "mtbf_h": round(self.mtbf_h, 2),
                "checkpoint_s": round(self.checkpoint_s, 1), "interval_s": round(self.interval_s, 1),
                "recovery_s": round(self.recovery_s, 1), "failure_model": self.failure_model}


def goodput_closed_form(delta_s: float, mtbf_s: float, recovery_s: float, interval_s: float | None = None) -> float:
    """T_s / T_w of Daly 2006 for one checkpoint level; tau = Daly's optimum unless `interval_s`."""
    if not math.isfinite(mtbf_s):
        return 1.0 if delta_s <= 0 or interval_s is None else interval_s / (interval_s + delta_s)
    if delta_s <= 0 and interval_s is None:
        raise ValueError("a checkpoint stall > 0 (or an interval) is needed for Daly's optimum")
    tau = interval_s if interval_s is not None else daly_interval(delta_s, mtbf_s)
    return 1.0 / daly_wall_time(tau, delta_s, mtbf_s, recovery_s, 1.0)


def run_goodput(failures: FailureModel, gpus: int, gpus_per_node: int, checkpoint_s: float, restore_s: float,
                detect_s: float = DETECT_S, restart_s: float = RESTART_S, manual_s: float = MANUAL_S,
                interval_s: float | None = None) -> RunGoodput:
    """Expected goodput of a job on `gpus` GPUs under `failures`, checkpointing every Daly interval
    (or `interval_s`) with a stall of `checkpoint_s`; every failure costs detection + restart +
    restore, and the model's manual share of them a person's diagnosis on top (mean R)."""
    mtbf_h = failures.mtbf_h(gpus, gpus_per_node)
    recovery = detect_s + restart_s + restore_s + failures.manual_fraction * manual_s
    tau = interval_s
    if tau is None:
        tau = daly_interval(checkpoint_s, mtbf_h * 3600.0) if math.isfinite(mtbf_h) else float("inf")
    g = goodput_closed_form(checkpoint_s, mtbf_h * 3600.0, recovery, tau) if math.isfinite(tau) else 1.0
    return RunGoodput(goodput=g, mtbf_h=mtbf_h, checkpoint_s=checkpoint_s, interval_s=tau, recovery_s=recovery,
                      failure_model=failures.name)
