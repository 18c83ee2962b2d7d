"""One computing segment of a job, in closed form: the accounting both twins share.

Between two events a job computes under its CheckpointSchedule (wanka.reliability.checkpoint), so its
progress, checkpoint stalls and durable levels follow from the elapsed time; checkpoints are never
events. The single-job engine (sim/engine.py) and the multi-job loop (sim/multijob.py) both close
their segments here.
"""

from __future__ import annotations

from wanka.reliability.checkpoint import CheckpointSchedule
from wanka.reliability.recovery import StepCommits


def run_segment(schedule: CheckpointSchedule, elapsed_s: float, speed: float, acc: dict,
                steps: StepCommits) -> tuple[float, float, float]:
    """Book `elapsed_s` wall seconds of computing at `speed` (relative to full): checkpoint stalls and
    compute not turned into full-speed progress ('degraded') go into `acc`, completed steps into
    `steps`. Returns (progress, memory-durable, storage-durable), in full-speed seconds."""
    comp = schedule.compute_done(elapsed_s)
    mem, sto = schedule.durable(elapsed_s)
    acc["checkpoint_stall"] += elapsed_s - comp
    acc["degraded"] += comp * (1.0 - speed)
    steps.advance(comp)
    return speed * comp, speed * mem, speed * sto
