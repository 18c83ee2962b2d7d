"""The twin's compiled, all-numeric view of one job in a scenario (seconds, GPUs, nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wanka.reliability.checkpoint import CheckpointSchedule
from wanka.reliability.failures import FailureModel
from wanka.reliability.recovery import Failure, RecoveryPolicy


@dataclass(frozen=True)
class PredictionConfig:
    enabled: bool = False
    recall: float = 0.0  # of failures that show precursors
    precision: float = 1.0
    lead_s: float = 0.0
    drain_s: float = 0.0
    false_alarms_per_node_s: float | None = None
    false_return_s: float = 7200.0  # a wrongly drained node is checked and returned after 2 h [G]


@dataclass(frozen=True)
class StragglerConfig:
    per_node_s: float = 0.0  # onset rate per node-second
    slowdown: float = 1.0
    detect_s: float = 600.0
    evict: bool = True


@dataclass(frozen=True)
class TwinConfig:
    duration_s: float
    gpus: int
    gpus_per_node: int
    dp: int  # data-parallel replicas
    failures: FailureModel
    schedule: CheckpointSchedule
    recovery: RecoveryPolicy = RecoveryPolicy()  # what a failure costs (wanka.reliability.recovery)
    spares: int = 0
    # per-cause arrays (same order as failures.causes)
    cause_failure: tuple[Failure, ...] = ()  # each cause as recovery sees it (and its manual variant below)
    cause_manual_failure: tuple[Failure, ...] = ()
    cause_repair_s: np.ndarray = field(default_factory=lambda: np.zeros(0))  # until the failed unit is back
    # group causes: rows (job nodes lost, replicas hit), one per group the job touches; None: one node
    cause_blast: tuple = ()
    repair_s: float = 86400.0
    manual_repair_s: float = 259200.0
    step_time_s: float = 0.0  # > 0: step-level commit semantics (torchft): a failure discards the step
    kill_every_s: float = 0.0  # > 0: a kill loop injects one replica failure per interval (last cause)
    kill_jitter: float = 0.0
    mem_covers_restart: bool = True
    mem_covers_node: bool = True
    mem_restore_s: float = 10.0
    sto_restore_s: float = 130.0
    flush_s: float = 0.0  # stop, take a checkpoint and wait until it is durable on storage
    planned_per_s: float = 0.0
    planned_restart_s: float = 300.0
    speed_of_dp: tuple[float, ...] = ()  # speed (relative to full) with k replicas, index k = 0..dp
    prediction: PredictionConfig = PredictionConfig()
    stragglers: StragglerConfig = StragglerConfig()

    @property
    def kind(self) -> str:
        return self.recovery.kind

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def has_groups(self) -> bool:
        return any(b is not None for b in self.cause_blast)

    @property
    def rate_per_s(self) -> np.ndarray:
        return self.failures.rates_per_hour(self.gpus, self.gpus_per_node) / 3600.0
