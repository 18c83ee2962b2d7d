"""Multi-job twin: several jobs share a cluster through `wanka.sched.Scheduler`.

The scheduler (a clock-free state machine) places gangs, queues, preempts, resizes elastic jobs and
keeps the spare pool; this loop owns the clock and each job's progress. Failures arrive on the whole
cluster as one superposed Poisson process and land on a uniformly random node; a group cause (rack /
leaf / spine) takes down every node of that node's group (`cluster.node_groups()`):
  * node_swap causes take the nodes down (`fail_nodes`); every job there stops, rolls back to its
    last durable checkpoint and is requeued; the nodes return after repair (`repair_nodes`). With
    hot_spare recovery as many spares as failed busy nodes are put into service (`take_spare`).
  * restart causes crash only the jobs on those nodes; they restart in place.
  * elastic: jobs are submitted with min_gpus = min_dp replicas, so a requeued job restarts at once
    on the GPUs that are free (at the planner's speed for the replicas it got) and the scheduler
    grows it back (`Resize`: checkpoint, restart and restore) when GPUs return.
  * torchft: as elastic, but a node failure rolls back only the step in flight (step-level commit):
    the surviving replicas keep their state, so the restart costs `reconfig_s` (plus `heal_s` when it
    lands on other GPUs) and a grow back costs `join_s` (torchft quorum change, PyTorch blog 2025
    [P]). Job-scoped failures roll back as under every policy.
What a failure does to each job it hits (detection time, drop replicas / restart in place / replace
nodes, roll back or not, restart cost) is `RecoveryPolicy.respond` (wanka.reliability.recovery), the
one decision the single-job engine and the fleet twin apply too; `StepCommits` is the step rule.
A preempted job (second-order preemption, Kokolis et al. [Q]) also rolls back. A (re)started job pays
detect + restart + restore before computing; checkpoints stall it as in the single-job engine.
Per-job ETTR = useful / (end - first start); cluster goodput = useful GPU-hours / cluster GPU-hours.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from wanka.errors import SpecError
from wanka.reliability.failures import GROUP_UNITS, resolve_groups
from wanka.reliability.recovery import DROP_REPLICAS, RecoveryPolicy, Response, StepCommits, failure_of
from wanka.sim.compile import compile_scenario, failure_model_of, spare_nodes, topology_groups
from wanka.sim.outputs import run_seeds, stat
from wanka.sim.scenario import Scenario
from wanka.sim.segment import run_segment
from wanka.sim.speeds import load_sized_cluster

SUBMIT, FAIL, REPAIR, RESUME, DONE = range(5)


@dataclass
class _JobRun:
    idx: int
    work_s: float
    schedule: object
    gpus: int
    restore_s: float
    dp: int = 1  # data-parallel replicas at full size
    replica: int = 1  # GPUs per replica
    speed_of_dp: tuple = ()  # planner speed with k replicas (index k)
    status: str = "pending"  # pending | queued | restarting | computing | done
    version: int = 0
    seg_start: float = 0.0
    base: float = 0.0  # progress at segment start
    durable: float = 0.0
    speed: float = 1.0
    first_start: float | None = None
    end: float | None = None
    stopped_at: float | None = None
    acc: dict = field(default_factory=lambda: dict.fromkeys(
        ("lost_work", "discarded_step", "checkpoint_stall", "restart", "queued", "degraded"), 0.0))
    policy: RecoveryPolicy = RecoveryPolicy()
    steps: StepCommits = field(default_factory=lambda: StepCommits(0.0))
    requeue_cost_s: float = 0.0  # restart cost once requeued (set when stopped)
    interruptions: int = 0
    preemptions: int = 0
    gpu_ids: tuple = ()
    ft_pending: bool = False  # torchft: requeued after losing replicas, state kept by the survivors

    def close(self, t: float) -> float:
        if self.status != "computing":
            return self.base
        done, _, sto = run_segment(self.schedule, t - self.seg_start, self.speed, self.acc, self.steps)
        progress = min(self.work_s, self.base + done)
        self.durable = max(self.durable, self.base + sto)
        self.base, self.seg_start = progress, t
        return progress

    def discard_step(self, t: float) -> None:
        """Per-step fault tolerance: close, then drop the step in flight (StepCommits)."""
        self.close(t)
        lost = self.speed * self.steps.discard()
        self.acc["discarded_step"] += lost
        self.base -= lost
        self.durable = min(self.durable, self.base)

    def rollback(self, t: float) -> None:
        progress = self.close(t)
        self.acc["lost_work"] += progress - self.durable
        self.base = self.durable
        self.steps.restart_from_checkpoint()
        self.version += 1


def _speed(d, jr: "_JobRun") -> float:
    """Speed of a job on the GPUs a decision gave it: the scheduler's placement factor times the
    planner's speed with the whole replicas those GPUs hold (k/dp without a planner)."""
    k = max(1, min(jr.dp, len(d.gpu_ids) // jr.replica))
    rel = jr.speed_of_dp[k] if jr.speed_of_dp else k / jr.dp
    return d.speed_factor * rel


def simulate_cluster(sc: Scenario, runs: int | None = None, seed: int | None = None, trace_first: bool = False) -> dict:
    runs = sc.runs if runs is None else runs
    seed = sc.seed if seed is None else seed
    from wanka.sched import Job, Preempt, Resize, Scheduler, Start  # noqa: PLC0415 (sched sits above nothing here)

    cluster = load_sized_cluster(sc.cluster, sc.cluster_gpus)
    comps = []
    for i, job in enumerate(sc.jobs):
        if job.work_h is None:
            raise SpecError(f"jobs[{i}].work_h", "compute hours to finish (multi-job scenarios)")
        if job.gpus is None:
            raise SpecError(f"jobs[{i}].gpus", "a GPU count (multi-job scenarios)")
        comps.append(compile_scenario(sc, i, cluster))
    rec = sc.recovery
    kind = rec.kind
    gpn, nodes = cluster.gpus_per_node, cluster.nodes
    # failures over the whole cluster: group causes (rack / leaf / spine) resolved on every node
    model = failure_model_of(sc)
    groups, switches = topology_groups(cluster, sc.failures.rack_nodes)
    if any(c.unit in GROUP_UNITS for c in model.causes):
        model, _ = resolve_groups(model, groups, np.arange(nodes), switches)
    repair_s = [(rec.repair_h if c.repair_h is None else c.repair_h) * 3600.0 for c in model.causes]
    total = sum(j.gpus for j in sc.jobs)
    spares = spare_nodes(rec.spares, cluster, total, model, rec.repair_h) if kind == "hot_spare" else 0
    spares = min(spares, nodes - 1)
    end = sc.duration_days * 86400.0
    per_run = []
    trace: list | None = None
    first_trace: list | None = None
    for r_i, rs in enumerate(run_seeds(seed, runs)):
        rng = np.random.default_rng(rs)
        s = Scheduler(cluster, policy=sc.sched_policy, spare_nodes=spares)
        jobs = [_JobRun(i, j.work_h * 3600.0, c.config.schedule, j.gpus, c.config.sto_restore_s,
                        dp=c.config.dp, replica=c.speed.replica_gpus, speed_of_dp=c.config.speed_of_dp,
                        policy=c.config.recovery, steps=StepCommits(c.config.step_time_s))
                for i, (j, c) in enumerate(zip(sc.jobs, comps))]
        ids = {f"{i}:{j.name}": jr for i, (j, jr) in enumerate(zip(sc.jobs, jobs))}
        times_h, causes = model.draw(rng, end / 3600.0, cluster.gpus, gpn)
        where = rng.integers(0, nodes, len(times_h))
        heap = [(j.submit_h * 3600.0, i, SUBMIT, i, 0) for i, j in enumerate(sc.jobs)]
        heap += [(float(t) * 3600.0, len(sc.jobs) + k, FAIL, int(where[k]), int(causes[k])) for k, t in enumerate(times_h)]
        heapq.heapify(heap)
        seq = len(heap)
        counts = {"failures": len(times_h), "job_hits": 0, "preemptions": 0, "node_failures": 0, "nodes_down": 0,
                  "ft_recoveries": 0, "resizes": 0}
        trace = [] if trace_first and r_i == 0 else None
        if trace is not None:
            first_trace = trace

        def push(t, kind_, a, b=0):
            nonlocal seq
            heapq.heappush(heap, (t, seq, kind_, a, b))
            seq += 1

        def mark(jr: _JobRun, t: float, status: str) -> None:
            jr.status = status
            if trace is not None:
                trace.append((t, jr.idx, status))

        def stop(jr: _JobRun, t: float, r: Response) -> None:
            """Roll back and requeue; the restart will cost r's detection + restart (+ restore)."""
            jr.rollback(t)
            jr.stopped_at = t
            jr.requeue_cost_s = r.detect_s + r.restart_s
            mark(jr, t, "queued")

        def begin(jr: _JobRun, t: float, cost: float) -> None:
            jr.version += 1
            jr.acc["restart"] += cost
            mark(jr, t, "restarting")
            push(t + cost, RESUME, jr.idx, jr.version)

        def apply(decisions, t: float) -> None:
            for d in decisions:
                jr = ids[d.job_id]
                if isinstance(d, Start):
                    if jr.first_start is None:
                        jr.first_start, cost = t, jr.policy.restart_s
                    elif jr.ft_pending:  # torchft: the survivors kept their state; new replicas heal from a peer
                        cost = jr.policy.rejoin_cost_s(on_new_gpus=not set(d.gpu_ids) <= set(jr.gpu_ids))
                        jr.acc["queued"] += t - (jr.stopped_at or t)
                    else:
                        cost = jr.requeue_cost_s + jr.restore_s
                        jr.acc["queued"] += t - (jr.stopped_at or t)
                    jr.ft_pending = False
                    jr.speed, jr.gpu_ids = _speed(d, jr), tuple(d.gpu_ids)
                    begin(jr, t, cost)
                elif isinstance(d, Preempt):
                    stop(jr, t, jr.policy.after_preemption())
                    jr.preemptions += 1
                    counts["preemptions"] += 1
                elif isinstance(d, Resize):
                    counts["resizes"] += 1
                    progress = jr.close(t)
                    jr.durable = max(jr.durable, progress)  # a planned resize checkpoints first: no work lost
                    jr.speed, jr.gpu_ids = _speed(d, jr), tuple(d.gpu_ids)
                    if jr.status == "computing":  # torchft re-forms the quorum; others stop and restart
                        begin(jr, t, jr.policy.resize_cost_s(jr.restore_s))

        def push_done(jr: _JobRun, t: float) -> None:
            push(t + jr.schedule.wall_for_compute((jr.work_s - jr.base) / max(jr.speed, 1e-12)), DONE, jr.idx, jr.version)

        names = list(ids)
        while heap and heap[0][0] < end:
            t, _, kind_, a, b = heapq.heappop(heap)
            if kind_ == SUBMIT:
                j = sc.jobs[a]
                elastic = jobs[a].policy.resizes
                lo = jobs[a].replica * jobs[a].policy.min_dp if elastic else None
                s.submit(Job(names[a], gpus=j.gpus, submit_s=t, duration_s=j.work_h * 3600.0, priority=j.priority,
                             min_gpus=lo, max_gpus=j.gpus if elastic else None), t)
                mark(jobs[a], t, "queued")
            elif kind_ == FAIL:
                cause = model.causes[b]
                hit_nodes = np.nonzero(groups[cause.unit] == groups[cause.unit][a])[0].tolist() \
                    if cause.unit in GROUP_UNITS else [a]
                holders = set(s.jobs_on_nodes(hit_nodes))
                running = [n for n in names if n in holders]
                failure = failure_of(cause)
                if not failure.node_lost:
                    for n in running:  # RESTART_IN_PLACE: the job crashes and restarts on the same GPUs
                        jr = ids[n]
                        r = jr.policy.respond(failure, jr.dp)
                        jr.rollback(t)
                        jr.interruptions += 1
                        counts["job_hits"] += 1
                        begin(jr, t, r.detect_s + r.restart_s + jr.restore_s)
                    continue
                fresh = [n for n in hit_nodes if n not in s.down]
                if not fresh:
                    continue
                counts["node_failures"] += 1
                counts["nodes_down"] += len(fresh)
                with_jobs = sum(1 for n in fresh if s.jobs_on_nodes([n]))
                for n in s.fail_nodes(fresh, t):
                    jr = ids[n]
                    jr.interruptions += 1
                    counts["job_hits"] += 1
                    # the scheduler decides how many replicas restart (min_gpus), so no SHRINK here
                    r = jr.policy.respond(failure, jr.dp)
                    if r.action == DROP_REPLICAS:  # replicas drop out, no rollback
                        jr.discard_step(t)
                        jr.ft_pending, jr.stopped_at = True, t
                        counts["ft_recoveries"] += 1
                        mark(jr, t, "queued")
                    else:  # REPLACE_NODES: roll back and requeue; the restart pays r's detection and cost
                        stop(jr, t, r)
                if spares and with_jobs and s.spares:
                    s.take_spare(min(with_jobs, len(s.spares)), near=fresh[:1])
                for n in fresh:
                    push(t + repair_s[b], REPAIR, n)
            elif kind_ == REPAIR:
                s.repair_nodes([a], t)
            elif kind_ == RESUME:
                jr = jobs[a]
                if b != jr.version or jr.status != "restarting":
                    continue
                jr.seg_start = t
                mark(jr, t, "computing")
                push_done(jr, t)
            elif kind_ == DONE:
                jr = jobs[a]
                if b != jr.version or jr.status != "computing":
                    continue
                jr.close(t)
                jr.base, jr.end = jr.work_s, t
                mark(jr, t, "done")
                s.finish(names[a], t)
            apply(s.schedule(t), t)
        for jr in jobs:
            jr.close(end)
        per_run.append((jobs, counts))
    out = _summary(sc, cluster, per_run, end, runs, seed)
    out["recovery"] = kind
    if first_trace is not None:
        out["_trace"] = first_trace
    return out


def _summary(sc: Scenario, cluster, per_run, end: float, runs: int, seed: int) -> dict:
    n_jobs = len(sc.jobs)
    jobs_out = []
    for i, spec in enumerate(sc.jobs):
        rs = [jobs[i] for jobs, _ in per_run]
        ettr = [jr.base / ((jr.end or end) - jr.first_start) if jr.first_start is not None and (jr.end or end) > jr.first_start else np.nan for jr in rs]
        jobs_out.append({
            "name": spec.name, "gpus": spec.gpus, "work_h": spec.work_h,
            "ettr": stat(ettr),
            "finished": stat([jr.end is not None for jr in rs]),
            "completion_h": stat([(jr.end - spec.submit_h * 3600.0) / 3600.0 if jr.end else np.nan for jr in rs]),
            "interruptions": stat([jr.interruptions for jr in rs]),
            "preemptions": stat([jr.preemptions for jr in rs]),
            "lost_gpu_hours": {k: stat([jr.acc[k] * spec.gpus / 3600.0 for jr in rs]) for k in rs[0].acc},
        })
    useful = [sum(jobs[i].base * sc.jobs[i].gpus for i in range(n_jobs)) / 3600.0 for jobs, _ in per_run]
    weights = np.array([j.gpus * j.work_h for j in sc.jobs], dtype=float)
    means = np.array([jo["ettr"]["mean"] if jo["ettr"]["mean"] is not None else np.nan for jo in jobs_out])
    ok = np.isfinite(means)
    return {
        "scenario": sc.name, "mode": "multi-job", "runs": runs, "seed": seed, "cluster": cluster.name,
        "duration_days": sc.duration_days, "jobs": jobs_out,
        "ettr_job_weighted": float(means[ok].mean()) if ok.any() else None,
        "ettr_gpu_hour_weighted": float((means[ok] * weights[ok]).sum() / weights[ok].sum()) if ok.any() else None,
        "cluster_goodput": stat(np.array(useful) / (cluster.gpus * end / 3600.0)),
        "failures": stat([c["failures"] for _, c in per_run]),
        "job_interruptions": stat([c["job_hits"] for _, c in per_run]),
        "preemptions": stat([c["preemptions"] for _, c in per_run]),
        "nodes_down_per_failure": stat([c["nodes_down"] / c["node_failures"] if c["node_failures"] else np.nan
                                        for _, c in per_run]),
        "torchft_recoveries": stat([c["ft_recoveries"] for _, c in per_run]),
        "resizes": stat([c["resizes"] for _, c in per_run]),
    }
