"""Scenario files for the digital twin (YAML/JSON or a preset name), validated with pydantic.

    name: llama3-54d
    cluster: meta-24k-h100            # a cluster preset or spec file
    jobs:
      - {name: llama3-405b, model: llama3-405b, layout: "tp=8,pp=16,dp=128,gbs=2048", gpus: 16384}
    failures: {model: llama3-h100}    # taxonomy in wanka/reliability/taxonomy.yaml, or inline causes
    planned: {per_day: 0.87}
    checkpoint: {policy: young, mode: async, write_s: 51, stall_s: 0.59, restore_s: 130}
    recovery: {kind: full_restart, spares: auto}
    duration_days: 54
    runs: 20
    seed: 1

A bad file raises SpecError naming the field (the CLI exits 2 with that one line).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from wanka.errors import SpecError, from_pydantic
from wanka.reliability.goodput import DETECT_S, MANUAL_S, RESTART_S
from wanka.specfile import StrictSpec, load_spec, preset_names


class JobSpec(StrictSpec):
    name: str = "job"
    model: str | None = None  # a workload preset or model spec file (for the planner)
    layout: str | None = None  # layout string; dp may be omitted
    gpus: int | None = Field(default=None, gt=0)  # default: the whole cluster minus spares
    step_time_s: float | None = Field(default=None, gt=0)  # explicit step time (overrides the planner)
    # multi-job scenarios (run through wanka.sched.Scheduler)
    submit_h: float = Field(default=0.0, ge=0)
    work_h: float | None = Field(default=None, gt=0)  # compute hours to finish at full speed
    priority: int = 0


class CauseSpec(StrictSpec):
    name: str
    component: str = "unknown"
    # rack | leaf | spine: a failure takes down every node of that group (cluster.node_groups()); the
    # rate is per group, or per switch with rate_per_switch_day (a rail-optimized leaf group has one
    # leaf switch per rail)
    unit: Literal["gpu", "node", "rack", "leaf", "spine"] = "node"
    rate_per_unit_day: float | None = Field(default=None, ge=0)
    rate_per_switch_day: float | None = Field(default=None, ge=0)
    repair_h: float | None = Field(default=None, ge=0)  # default: recovery.repair_h
    count: float | None = Field(default=None, ge=0)
    recovery: Literal["restart", "node_swap"] = "node_swap"
    scope: Literal["job", "node"] = "node"
    detect: Literal["explicit", "hang"] = "explicit"
    precursor_share: float = Field(default=0.0, ge=0, le=1)


class FailureSpec(StrictSpec):
    model: str = "llama3-h100"  # a taxonomy name; ignored when `causes` is given
    scale: float = Field(default=1.0, ge=0)  # multiply every rate (what-if)
    causes: list[CauseSpec] | None = None
    exposure: dict[str, float] | None = None  # {gpus, gpus_per_node, days} for `count` causes
    manual_fraction: float | None = Field(default=None, ge=0, le=1)
    # nodes per rack for `unit: rack` causes: Meta RSC "2 servers per rack" [Q] (Kokolis et al.);
    # Meta's 24k H100 racks hold 16 GPUs in two servers [P] (cluster preset meta-24k-h100)
    rack_nodes: int = Field(default=2, ge=1)


class PlannedSpec(StrictSpec):
    per_day: float = Field(default=0.0, ge=0)  # planned interruptions per day of the job
    restart_s: float | None = Field(default=None, ge=0)  # default: recovery.restart_s


class MemoryLevelSpec(StrictSpec):
    policy: Literal["fixed", "young", "daly"] = "young"
    interval_s: float | None = Field(default=None, gt=0)
    stall_s: float = Field(default=1.0, gt=0)  # GPU -> host/peer copy that blocks training
    lag_s: float = Field(default=0.0, ge=0)  # copy to the peer finishes this long after the stall
    restore_s: float = Field(default=10.0, ge=0)
    covers: list[Literal["restart", "node_swap"]] = ["restart", "node_swap"]

    @model_validator(mode="after")
    def _fixed_needs_interval(self):
        if self.policy == "fixed" and self.interval_s is None:
            raise ValueError("interval_s: expected a value when policy is fixed")
        return self


class CheckpointSpec(StrictSpec):
    policy: Literal["fixed", "young", "daly"] = "young"
    interval_s: float | None = Field(default=None, gt=0)  # compute seconds between checkpoints (fixed)
    mode: Literal["sync", "async"] = "async"
    write_s: float | None = Field(default=None, gt=0)  # time to persist one checkpoint to storage
    size_GB_per_gpu: float | None = Field(default=None, gt=0)  # or: size and storage bandwidth
    storage_TBps: float | None = Field(default=None, gt=0)
    stall_s: float = Field(default=1.0, gt=0)  # async: blocking snapshot time
    restore_s: float = Field(default=130.0, ge=0)  # load from storage on restart
    memory: MemoryLevelSpec | None = None  # in-memory / peer level (multi-level when set)

    @model_validator(mode="after")
    def _check(self):
        if self.policy == "fixed" and self.interval_s is None:
            raise ValueError("interval_s: expected a value when policy is fixed")
        if self.write_s is None and (self.size_GB_per_gpu is None or self.storage_TBps is None):
            raise ValueError("write_s: expected a value (or size_GB_per_gpu and storage_TBps)")
        return self


class RecoverySpec(StrictSpec):
    kind: Literal["full_restart", "hot_spare", "elastic", "torchft"] = "full_restart"  # wanka.reliability.recovery
    # replacement nodes: a number; auto = the cluster's nodes the job does not use; p99 = ByteRobust's
    # P99 of simultaneous node failures over the repair time (wanka.reliability.spares)
    spares: int | str = 0
    detect_s: float = Field(default=DETECT_S, ge=0)  # explicit failures: ByteRobust section 2.2 (~60 s) [P]
    hang_detect_s: float = Field(default=600.0, ge=0)  # hangs: PyTorch NCCL watchdog default 10 min [P]
    restart_s: float = Field(default=RESTART_S, ge=0)  # re-initialise on the same nodes: u0 5-20 min (Meta RSC) [Q]
    requeue_s: float | None = Field(default=None, ge=0)  # full_restart after a node loss; default restart_s
    swap_s: float = Field(default=60.0, ge=0)  # hot-spare swap: ByteRobust hot update 46-65 s [P]
    manual_s: float = Field(default=MANUAL_S, ge=0)  # manual diagnosis time [G]
    repair_h: float = Field(default=24.0, ge=0)  # node back in the pool after repair [G]
    manual_repair_h: float = Field(default=72.0, ge=0)  # [G]
    min_dp: int = Field(default=1, ge=1)  # elastic/torchft: fewest replicas to keep training
    heal_s: float = Field(default=60.0, ge=0)  # torchft: a replacement replica joins after this [G]
    reconfig_s: float = Field(default=5.0, ge=0)  # torchft quorum change: Gloo timeout 5 s [P]
    # torchft: a healed replica joining the quorum reconfigures every replica's process group once;
    # Gloo re-initialises in < 1 s (PyTorch blog "Fault Tolerant Llama", 2025) [P]
    join_s: float = Field(default=1.0, ge=0)

    @field_validator("spares", mode="before")
    @classmethod
    def _spares(cls, v):
        if v in ("auto", "p99") or (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            return v
        raise ValueError("a whole number of nodes >= 0, 'auto' or 'p99'")


class PredictionSpec(StrictSpec):
    enabled: bool = False
    recall: float = Field(default=0.5, ge=0, le=1)  # of failures with precursors
    precision: float = Field(default=0.85, gt=0, le=1)
    lead_s: float = Field(default=1800.0, ge=0)
    drain_s: float = Field(default=120.0, ge=0)  # checkpoint flush + migrate cost beyond restart [G]
    # false alarms per node-day (base-rate free, from wanka.reliability.predictor); when given it sets the
    # false-drain rate, otherwise that rate follows from precision at the scenario's failure rate
    false_alarms_per_node_day: float | None = Field(default=None, ge=0)


class StragglerSpec(StrictSpec):
    per_node_day: float = Field(default=0.0, ge=0)  # onset rate of a fail-slow node
    slowdown: float = Field(default=1.1, ge=1)  # the job runs this much slower (MegaScale ~10%) [P]
    detect_s: float = Field(default=600.0, gt=0)  # found after this long, then evicted (checkpoint + swap)
    evict: bool = True  # false: the fail-slow episode ends by itself after detect_s


class KillLoopSpec(StrictSpec):
    """Synthetic failure injection: kill one live replica group every `every_s` seconds.

    torchft's chaos harness (torchft/examples/slurm/punisher.py, kill_loop) sleeps a fixed
    `mtbf_secs` between kills [P]; `jitter` spreads each interval uniformly by +-jitter x every_s
    (the kill tool's own latency; 0.1 is a guess [G]). The killed group's processes are back
    `back_s` later (then they heal, recovery.heal_s, before they contribute).
    """

    every_s: float = Field(gt=0)
    jitter: float = Field(default=0.1, ge=0, lt=1)
    back_s: float = Field(default=20.0, ge=0)


class Scenario(StrictSpec):
    name: str = "scenario"
    description: str = ""
    cluster: str | dict[str, Any] = "wanka-10k"  # a preset, a spec file, or an inline cluster spec
    cluster_gpus: int | None = Field(default=None, gt=0)
    jobs: list[JobSpec] = Field(min_length=1)
    failures: FailureSpec = FailureSpec()
    planned: PlannedSpec = PlannedSpec()
    checkpoint: CheckpointSpec = CheckpointSpec(write_s=60.0)
    recovery: RecoverySpec = RecoverySpec()
    prediction: PredictionSpec = PredictionSpec()
    stragglers: StragglerSpec = StragglerSpec()
    kill_loop: KillLoopSpec | None = None
    duration_days: float = Field(gt=0, le=3650)
    runs: int = Field(default=10, ge=1, le=100000)
    seed: int = Field(default=0, ge=0)
    sched_policy: str = "topo-bestfit"  # multi-job scenarios only


def scenario_names() -> list[str]:
    return preset_names("wanka.sim")


def parse_scenario(data: dict[str, Any], source: str | None = None) -> Scenario:
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:  # from_pydantic writes list positions as jobs[0].gpus
        raise from_pydantic(exc, source=source) from None
    if isinstance(sc.cluster, dict):  # an inline cluster is checked now, as the cluster CLI checks a file
        from wanka.sim.speeds import inline_cluster  # noqa: PLC0415 (speeds needs the planner's layers)

        try:
            inline_cluster(sc.cluster)
        except SpecError as exc:
            raise SpecError(exc.field, exc.expected, exc.got, source=source) from None
    return sc


def load_scenario(name_or_path: str, **overrides: Any) -> Scenario:
    data, source = load_spec(name_or_path, "wanka.sim", "scenario")
    if not isinstance(data, dict):
        raise SpecError("scenario", "a mapping of fields", type(data).__name__, source=source)
    return parse_scenario({**data, **{k: v for k, v in overrides.items() if v is not None}}, source)
