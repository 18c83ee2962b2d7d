"""Multi-job twin: several jobs share a cluster through `wanka.sched.Scheduler`.

The scheduler (a clock-free state machine) places gangs, queues, preempts and keeps the spare pool;
this loop owns the clock and each job's progress. Failures arrive on the whole cluster as one
superposed Poisson process (rate per node x nodes) and land on a uniformly random node:
  * node_swap causes take the node down (`fail_nodes`); every job on it stops, rolls back to its last
    durable checkpoint and is requeued; the node returns after repair (`repair_nodes`). With
    hot_spare recovery a spare is put into service (`take_spare`) so the job can restart at once.
  * restart causes crash only the job on that node (if any); it restarts in place.
A preempted job (second-order preemption, Kokolis et al. [Q]) also rolls back. A (re)started job pays
detect + restart + restore before computing; checkpoints stall it as in the single-job engine.
Per-job ETTR = useful / (end - first start); cluster goodput = useful GPU-hours / cluster GPU-hours.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from wanka.errors import SpecError
from wanka.sim.compile import compile_scenario, spare_nodes
from wanka.sim.outputs import run_seeds, stat
from wanka.sim.scenario import Scenario
from wanka.sim.speeds import load_sized_cluster

SUBMIT, FAIL, REPAIR, RESUME, DONE = range(5)


@dataclass
class _JobRun:
    idx: int
    work_s: float
    schedule: object
    gpus: int
    restore_s: float
    status: str = "pending"  # pending | queued | restarting | computing | done
    version: int = 0
    seg_start: float = 0.0
    base: float = 0.0  # progress at segment start
    durable: float = 0.0
    speed: float = 1.0
    first_start: float | None = None
    end: float | None = None
    stopped_at: float | None = None
    acc: dict = field(default_factory=lambda: dict.fromkeys(("lost_work", "checkpoint_stall", "restart", "queued", "degraded"), 0.0))
    interruptions: int = 0
    preemptions: int = 0

    def close(self, t: float) -> float:
        if self.status != "computing":
            return self.base
        e = t - self.seg_start
        comp = self.schedule.compute_done(e)
        _, sto = self.schedule.durable(e)
        progress = min(self.work_s, self.base + self.speed * comp)
        self.durable = max(self.durable, self.base + self.speed * sto)
        self.acc["checkpoint_stall"] += e - comp
        self.acc["degraded"] += comp * (1.0 - self.speed)
        self.base, self.seg_start = progress, t
        return progress

    def rollback(self, t: float) -> None:
        progress = self.close(t)
        self.acc["lost_work"] += progress - self.durable
        self.base = self.durable
        self.version += 1


def simulate_cluster(sc: Scenario, runs: int | None = None, seed: int | None = None) -> dict:
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
    cfg0 = comps[0].config
    model = cfg0.failures
    gpn, nodes = cluster.gpus_per_node, cluster.nodes
    total = sum(j.gpus for j in sc.jobs)
    spares = spare_nodes(sc.recovery.spares, cluster, total, model, sc.recovery.repair_h) if sc.recovery.kind == "hot_spare" else 0
    spares = min(spares, nodes - 1)
    end = sc.duration_days * 86400.0
    per_run = []
    for rs in run_seeds(seed, runs):
        rng = np.random.default_rng(rs)
        s = Scheduler(cluster, policy=sc.sched_policy, spare_nodes=spares)
        jobs = [_JobRun(i, j.work_h * 3600.0, c.config.schedule, j.gpus, c.config.sto_restore_s)
                for i, (j, c) in enumerate(zip(sc.jobs, comps))]
        ids = {f"{i}:{j.name}": jr for i, (j, jr) in enumerate(zip(sc.jobs, jobs))}
        times_h, causes = model.draw(rng, end / 3600.0, cluster.gpus, gpn)
        where = rng.integers(0, nodes, len(times_h))
        heap = [(j.submit_h * 3600.0, i, SUBMIT, i, 0) for i, j in enumerate(sc.jobs)]
        heap += [(float(t) * 3600.0, len(sc.jobs) + k, FAIL, int(where[k]), int(causes[k])) for k, t in enumerate(times_h)]
        heapq.heapify(heap)
        seq = len(heap)
        counts = {"failures": len(times_h), "job_hits": 0, "preemptions": 0}

        def push(t, kind, a, b=0):
            nonlocal seq
            heapq.heappush(heap, (t, seq, kind, a, b))
            seq += 1

        def stop(jr: _JobRun, t: float) -> None:
            jr.rollback(t)
            jr.status, jr.stopped_at = "queued", t

        def apply(decisions, t: float) -> None:
            for d in decisions:
                jr = ids[d.job_id]
                if isinstance(d, Start):
                    if jr.first_start is None:
                        jr.first_start, cost = t, sc.recovery.restart_s
                    else:
                        cost = sc.recovery.detect_s + sc.recovery.restart_s + jr.restore_s
                        jr.acc["queued"] += t - (jr.stopped_at or t)
                    jr.speed = d.speed_factor * len(d.gpu_ids) / jr.gpus
                    jr.status, jr.version = "restarting", jr.version + 1
                    jr.acc["restart"] += cost
                    push(t + cost, RESUME, jr.idx, jr.version)
                elif isinstance(d, Preempt):
                    stop(jr, t)
                    jr.preemptions += 1
                    counts["preemptions"] += 1
                elif isinstance(d, Resize):
                    jr.close(t)
                    jr.speed = d.speed_factor * len(d.gpu_ids) / jr.gpus
                    if jr.status == "computing":
                        jr.version += 1
                        push_done(jr, t)

        def push_done(jr: _JobRun, t: float) -> None:
            push(t + jr.schedule.wall_for_compute((jr.work_s - jr.base) / max(jr.speed, 1e-12)), DONE, jr.idx, jr.version)

        names = list(ids)
        while heap and heap[0][0] < end:
            t, _, kind, a, b = heapq.heappop(heap)
            if kind == SUBMIT:
                j = sc.jobs[a]
                s.submit(Job(names[a], gpus=j.gpus, submit_s=t, duration_s=j.work_h * 3600.0, priority=j.priority), t)
                jobs[a].status = "queued"
            elif kind == FAIL:
                cause = model.causes[b]
                owners = set(s.free.owner[a * gpn:(a + 1) * gpn].tolist()) - {-1}
                running = [n for n in names if s.jobs.get(n) is not None and s.jobs[n].slot in owners]
                if cause.recovery == "restart":
                    for n in running:  # the job crashes and restarts on the same GPUs
                        jr = ids[n]
                        jr.rollback(t)
                        jr.interruptions += 1
                        counts["job_hits"] += 1
                        cost = sc.recovery.detect_s + sc.recovery.restart_s + jr.restore_s
                        jr.acc["restart"] += cost
                        jr.status = "restarting"
                        push(t + cost, RESUME, jr.idx, jr.version)
                    continue
                if a in s.down:
                    continue
                for n in s.fail_nodes([a], t):
                    jr = ids[n]
                    stop(jr, t)
                    jr.interruptions += 1
                    counts["job_hits"] += 1
                    if spares:
                        s.take_spare(1, near=[a])
                push(t + sc.recovery.repair_h * 3600.0, REPAIR, a)
            elif kind == REPAIR:
                s.repair_nodes([a], t)
            elif kind == RESUME:
                jr = jobs[a]
                if b != jr.version or jr.status != "restarting":
                    continue
                jr.status, jr.seg_start = "computing", t
                push_done(jr, t)
            elif kind == DONE:
                jr = jobs[a]
                if b != jr.version or jr.status != "computing":
                    continue
                jr.close(t)
                jr.base, jr.status, jr.end = jr.work_s, "done", t
                s.finish(names[a], t)
            apply(s.schedule(t), t)
        for jr in jobs:
            jr.close(end)
        per_run.append((jobs, counts))
    return _summary(sc, cluster, per_run, end, runs, seed)


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
    }
