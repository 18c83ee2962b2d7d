"""Scenario (validated YAML) -> TwinConfig (numbers the engine runs), for a single-job scenario."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from wanka.cluster import Cluster
from wanka.errors import SpecError
from wanka.reliability.recovery import RecoveryPolicy, failure_of
from wanka.reliability.checkpoint import CheckpointSchedule, interval_for
from wanka.reliability.failures import GROUP_UNITS, Cause, FailureModel, build_failure_model, load_failure_model, resolve_groups
from wanka.sim.config import PredictionConfig, StragglerConfig, TwinConfig
from wanka.sim.scenario import Scenario
from wanka.reliability.spares import p99_spares
from wanka.sim.speeds import JobSpeed, job_speed, load_sized_cluster


@dataclass(frozen=True)
class Compiled:
    scenario: Scenario
    cluster: Cluster
    config: TwinConfig
    speed: JobSpeed
    checkpoint: dict  # chosen intervals and the MTBFs they were computed from
    reserved_spares: int = 0  # nodes held idle for this job alone


def spare_nodes(spares, cluster: Cluster, job_gpus: int, model: FailureModel, repair_h: float) -> int:
    """auto: the cluster's nodes the job does not use; p99: ByteRobust P99 sizing over the repair time."""
    if spares == "auto":
        return max(0, cluster.nodes - math.ceil(job_gpus / cluster.gpus_per_node))
    if spares == "p99":
        return p99_spares(model, job_gpus, cluster.gpus_per_node, window_h=max(repair_h, 1.0))
    return int(spares)


def recovery_policy(rec, dp: int) -> RecoveryPolicy:
    """The scenario's `recovery` section as the policy both twins apply."""
    return RecoveryPolicy(kind=rec.kind, detect_s=rec.detect_s, hang_detect_s=rec.hang_detect_s, manual_s=rec.manual_s,
                          restart_s=rec.restart_s,
                          requeue_s=rec.restart_s if rec.requeue_s is None else rec.requeue_s, swap_s=rec.swap_s,
                          heal_s=rec.heal_s, reconfig_s=rec.reconfig_s, join_s=rec.join_s, min_dp=min(rec.min_dp, dp))


KILL_CAUSE = "kill_loop"


def with_kill_loop(model: FailureModel, back_s: float) -> FailureModel:
    """The model plus a zero-rate cause that stands for the kill loop's injected replica kills."""
    kill = Cause(name=KILL_CAUSE, component="injected", unit="node", rate_per_unit_hour=0.0, recovery="node_swap",
                 scope="node", detect="injected", repair_h=back_s / 3600.0)
    return replace(model, causes=model.causes + (kill,))


def failure_model_of(sc: Scenario) -> FailureModel:
    f = sc.failures
    if f.causes is not None:
        data = {"causes": [c.model_dump(exclude_none=True) for c in f.causes], "exposure": f.exposure,
                "manual_fraction": f.manual_fraction or 0.0}
        model = build_failure_model(data, "custom", "failures")
    else:
        model = load_failure_model(f.model)
        if f.manual_fraction is not None:
            model = FailureModel(model.name, model.causes, f.manual_fraction, model.source)
    return model.scaled(f.scale) if f.scale != 1.0 else model


def topology_groups(cluster: Cluster, rack_nodes: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Group id of every node for the blast-radius units, and how many switches serve one group.

    leaf and spine come from `cluster.node_groups()` (a spine group is a pod: the nodes under one
    spine block); a rack is `rack_nodes` consecutive nodes. A rail-optimized leaf group is served by
    one leaf switch per rail (gpus_per_node of them), and losing any one cuts every node of the group
    off one rail, which a collective cannot survive; any other group by one switch or unit.
    """
    groups = cluster.node_groups()
    idx = np.arange(cluster.nodes)
    out = {"rack": idx // rack_nodes, "leaf": groups.get("leaf", idx), "spine": groups.get("spine", groups.get("leaf", idx))}
    rail = cluster.scale_out.topology == "rail-fat-tree"
    return out, {"leaf": float(cluster.gpus_per_node) if rail else 1.0, "rack": 1.0, "spine": 1.0}


def _storage_write_s(sc: Scenario, gpus: int) -> float:
    ck = sc.checkpoint
    if ck.write_s is not None:
        return ck.write_s
    return ck.size_GB_per_gpu * gpus / (ck.storage_TBps * 1000.0)  # GB / (GB/s)


def build_schedule(sc: Scenario, model: FailureModel, gpus: int, gpn: int, kind: str) -> tuple[CheckpointSchedule, dict]:
    """Checkpoint cadence: intervals from fixed | young | daly, each level with its own M and delta.

    delta is the stall a checkpoint costs (sync: the storage write; async: the snapshot stall). M is
    the MTBF of the failures that roll back to that level: with a memory level, storage serves only
    what memory does not cover; under torchft node-scoped failures roll back to nothing.
    """
    ck = sc.checkpoint
    write = _storage_write_s(sc, gpus)
    mem = ck.memory
    covers = set(mem.covers) if mem else set()

    def rolls_back(c, level: str) -> bool:
        if kind == "torchft" and c.scope == "node" and c.recovery == "node_swap":
            return False
        in_mem = mem is not None and c.recovery in covers
        return in_mem if level == "memory" else not in_mem

    # manual interventions always restore from storage (the engine does so), so they count here too
    rates = model.rates_per_hour(gpus, gpn)
    to_sto = sum(r * (1.0 if rolls_back(c, "storage") else model.manual_fraction if rolls_back(c, "memory") else 0.0)
                 for r, c in zip(rates, model.causes))
    m_sto = 3600.0 / to_sto if to_sto > 0 else float("inf")
    sto_stall = write if ck.mode == "sync" else ck.stall_s
    sto_lag = 0.0 if ck.mode == "sync" else write
    tau_sto = interval_for(ck.policy, sto_stall, m_sto, ck.interval_s)
    info = {"policy": ck.policy, "mode": ck.mode, "write_s": write, "storage_mtbf_h": m_sto / 3600.0}
    if mem is None:
        if ck.mode == "async":
            tau_sto = max(tau_sto, write)  # one write in flight at a time: interval >= write time
        info["interval_s"] = tau_sto
        return CheckpointSchedule(tau_s=tau_sto, stall_s=sto_stall, sto_lag_s=sto_lag), info
    m_mem = model.mtbf_h(gpus, gpn, lambda c: rolls_back(c, "memory")) * 3600.0
    tau_mem = interval_for(mem.policy, mem.stall_s, m_mem, mem.interval_s)
    tau_mem = max(tau_mem, mem.lag_s)
    if not math.isfinite(tau_sto):
        every = 10**9
    else:
        every = max(1, round(max(tau_sto, write if ck.mode == "async" else 0.0) / tau_mem))
    extra = write if ck.mode == "sync" else 0.0
    info.update(memory_interval_s=tau_mem, memory_mtbf_h=m_mem / 3600.0, interval_s=every * tau_mem,
                storage_every=every)
    sched = CheckpointSchedule(tau_s=tau_mem, stall_s=mem.stall_s, every=every, extra_stall_s=extra,
                               mem_lag_s=mem.lag_s, sto_lag_s=sto_lag, has_memory=True)
    return sched, info


def compile_scenario(sc: Scenario, job_index: int = 0, cluster: Cluster | None = None) -> Compiled:
    cluster = cluster or load_sized_cluster(sc.cluster, sc.cluster_gpus)
    job = sc.jobs[job_index]
    field = f"jobs[{job_index}]"
    rec = sc.recovery
    gpus = job.gpus or cluster.gpus - (rec.spares * cluster.gpus_per_node if isinstance(rec.spares, int) else 0)
    if gpus > cluster.gpus:
        raise SpecError(f"{field}.gpus", f"at most the cluster's {cluster.gpus} GPUs", gpus)
    if gpus % cluster.gpus_per_node:
        raise SpecError(f"{field}.gpus", f"a multiple of gpus_per_node ({cluster.gpus_per_node})", gpus)
    gpn = cluster.gpus_per_node
    speed = job_speed(job, cluster, gpus, sc.cluster, field)
    model = failure_model_of(sc)
    if sc.kill_loop is not None:  # injected kills are the model's last cause (rate 0: drawn by the engine)
        model = with_kill_loop(model, sc.kill_loop.back_s)
    blast: list = [None] * len(model.causes)
    if any(c.unit in GROUP_UNITS for c in model.causes):
        # the job holds the first nodes of the cluster: node ids follow the topology, so this is a
        # minimal-spread placement; a group failure takes down the job's nodes in that group
        groups, switches = topology_groups(cluster, sc.failures.rack_nodes)
        model, blast = resolve_groups(model, groups, np.arange(gpus // gpn), switches,
                                      replica_nodes=max(1, speed.replica_gpus // gpn))
    try:
        schedule, ck_info = build_schedule(sc, model, gpus, gpn, rec.kind)
    except ValueError as exc:
        raise SpecError("checkpoint", str(exc)) from None
    spares = spare_nodes(rec.spares, cluster, gpus, model, rec.repair_h)
    write = ck_info["write_s"]
    flush = schedule.stall_s + schedule.extra_stall_s + (write if sc.checkpoint.mode == "async" else 0.0)
    if sc.checkpoint.memory is None and sc.checkpoint.mode == "sync":
        flush = write
    pr = sc.prediction
    st = sc.stragglers
    cfg = TwinConfig(
        duration_s=sc.duration_days * 86400.0, gpus=gpus, gpus_per_node=gpn, dp=speed.dp, failures=model,
        schedule=schedule, recovery=recovery_policy(rec, speed.dp), spares=spares,
        cause_failure=tuple(failure_of(c) for c in model.causes),
        cause_manual_failure=tuple(failure_of(c, manual=True) for c in model.causes),
        repair_s=rec.repair_h * 3600.0,
        cause_repair_s=np.array([(rec.repair_h if c.repair_h is None else c.repair_h) * 3600.0 for c in model.causes]),
        cause_blast=tuple(blast),
        manual_repair_s=rec.manual_repair_h * 3600.0,
        step_time_s=(speed.step_time_s or 0.0) if rec.kind == "torchft" else 0.0,
        kill_every_s=sc.kill_loop.every_s if sc.kill_loop else 0.0,
        kill_jitter=sc.kill_loop.jitter if sc.kill_loop else 0.0,
        mem_covers_restart=bool(sc.checkpoint.memory and "restart" in sc.checkpoint.memory.covers),
        mem_covers_node=bool(sc.checkpoint.memory and "node_swap" in sc.checkpoint.memory.covers),
        mem_restore_s=sc.checkpoint.memory.restore_s if sc.checkpoint.memory else 0.0,
        sto_restore_s=sc.checkpoint.restore_s, flush_s=flush,
        planned_per_s=sc.planned.per_day / 86400.0,
        planned_restart_s=rec.restart_s if sc.planned.restart_s is None else sc.planned.restart_s,
        speed_of_dp=speed.speed_of_dp,
        prediction=PredictionConfig(pr.enabled, pr.recall, pr.precision, pr.lead_s, pr.drain_s,
                                    None if pr.false_alarms_per_node_day is None else pr.false_alarms_per_node_day / 86400.0),
        stragglers=StragglerConfig(st.per_node_day / 86400.0, st.slowdown, st.detect_s, st.evict),
    )
    reserved = 0 if rec.spares == "auto" else spares  # dedicated spares count against goodput
    return Compiled(sc, cluster, cfg, speed, ck_info, reserved)
