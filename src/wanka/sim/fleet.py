"""Whole-cluster twin: a job trace (Philly) replayed on a cluster with failures, checkpoints,
preemption and recovery for every job.

    from wanka.sim.fleet import FleetConfig, load_fleet_trace, simulate_fleet
    out = simulate_fleet(FleetConfig(gpus=10240, days=30), load_fleet_trace("philly", scale=4), runs=10, seed=1)

Each run replays the same arrivals (the trace) and draws its own failures, so a seed fixes the
result and run i uses stream i of SeedSequence(seed) whatever the number of runs (as the job twin).

- **Scheduling**: first-come first-served over a GPU pool, with first-fit backfill over the first
  `backfill_depth` queued jobs. GPUs are counted, not placed (the scheduler layer, wanka.sched, does
  topology-aware placement; at 82k jobs x 10 runs it is too slow for this twin's budget).
- **Failures**: the scenario's failure model (default Llama 3 Table 5 rates, wanka.reliability) on
  the whole cluster as one Poisson process. A failure lands on a uniformly random GPU; the job
  holding it (if any) is interrupted. Jobs that share the failed node are not co-killed (GPUs are
  not placed). A node-class failure also takes `gpus_per_node` GPUs out of the pool until repair.
- **Recovery** is `RecoveryPolicy.respond` (wanka.reliability.recovery), the decision the job twins
  apply too: a restart-class failure restarts in place (detect + restart + restore; a hang is
  detected after hang_detect_s); a node-class one requeues the job at the head of the queue (detect
  + requeue + restore when it starts again). Both roll back to the last checkpoint. Jobs are not
  split into replicas here, so only full_restart and hot_spare apply.
- **Checkpoints**: every job checkpoints at its own Young interval, sqrt(2 delta M_job), with M_job
  its GPUs' share of the failure rate (Young 1974; reliability.md section 3.2); a checkpoint stalls
  the job `write_s` and is durable when the stall ends. Progress and durable work between events
  come from the job twins' CheckpointSchedule (wanka.reliability.checkpoint).
- **Preemption**: a job requeued after a failure that does not fit preempts running jobs that are
  preemptible and have run for at least `preemptible_after_s` (Meta RSC: jobs become pre-emptible
  after 2 h [Q], Kokolis et al. HPCA'25), most recent first; they roll back and are requeued
  (second-order preemption [Q]).

Time accounting closes per job: useful + lost + restart + checkpoint_stall + queued = wall, where
wall runs from submission to completion (or the horizon). Per-job ETTR is useful / (end - first
start), as in the multi-job twin (requeued waits count, the first wait does not); queueing is
reported apart (queue_h).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from wanka.errors import SpecError
from wanka.reliability.checkpoint import CheckpointSchedule, interval_for
from wanka.reliability.failures import FailureModel, load_failure_model
from wanka.reliability.recovery import REPLACE_NODES, RecoveryPolicy, Response, failure_of
from wanka.sim.fleet_outputs import CATEGORIES, job_accounts, summarise_fleet  # noqa: F401 (job_accounts: API)
from wanka.sim.outputs import run_seeds

DONE, FAIL, REPAIR = range(3)
PREEMPT_RETRY_S = 600.0  # a requeued job that found too few preemptible GPUs looks again after this [G]


@dataclass(frozen=True)
class FleetConfig:
    gpus: int = 10240
    gpus_per_node: int = 8
    days: float = 30.0
    failure_model: str = "llama3-h100"
    failure_scale: float = 1.0
    write_s: float = 30.0  # checkpoint stall per job [G]
    restore_s: float = 60.0  # [G]
    repair_h: float = 24.0  # [G], as the job twin's default
    # detection (60 s explicit, 10 min hangs) and restart costs: wanka.reliability.recovery, sources there
    recovery: RecoveryPolicy = RecoveryPolicy(kind="full_restart", restart_s=300.0, requeue_s=300.0)
    preemptible_after_s: float = 7200.0  # Meta RSC: pre-emptible after 2 h [Q]
    backfill_depth: int = 64

    def __post_init__(self):
        for name in ("gpus", "gpus_per_node", "backfill_depth"):
            if getattr(self, name) < 1:
                raise SpecError(name, "an integer >= 1", getattr(self, name))
        if self.gpus % self.gpus_per_node:
            raise SpecError("gpus", f"a multiple of gpus_per_node ({self.gpus_per_node})", self.gpus)
        if not 0 < self.days <= 3650:
            raise SpecError("days", "a duration in (0, 3650] days", self.days)
        if not (math.isfinite(self.failure_scale) and self.failure_scale >= 0):
            raise SpecError("failure_scale", "a number >= 0", self.failure_scale)
        if self.recovery.kind not in ("full_restart", "hot_spare"):  # jobs are not split into replicas here
            raise SpecError("recovery.kind", "'full_restart' or 'hot_spare' (the fleet twin restarts whole jobs)",
                            self.recovery.kind)


@dataclass(frozen=True)
class FleetTrace:
    name: str
    submit_s: np.ndarray
    work_s: np.ndarray  # compute seconds at the requested GPUs
    gpus: np.ndarray
    preemptible: np.ndarray


def load_fleet_trace(name: str = "philly", scale: float = 1.0, cluster_gpus: int | None = None,
                     limit: int | None = None) -> FleetTrace:
    """A trace (wanka.sched.trace: `philly` is shipped in the package) as arrays; `scale` compresses
    arrivals (x faster), `limit` keeps the first rows."""
    from wanka.sched.trace import load_trace  # noqa: PLC0415

    tr = load_trace(name, cluster_gpus=cluster_gpus, scale=scale, limit=limit)
    jobs = tr.jobs
    return FleetTrace(tr.name, np.array([j.submit_s for j in jobs], float), np.array([j.duration_s for j in jobs], float),
                      np.array([j.gpus for j in jobs], np.int64), np.array([j.preemptible for j in jobs], bool))


class _FleetRun:
    """One Monte-Carlo run. Per-job state lives in Python lists: the loop touches single elements,
    which lists serve ~5x faster than numpy arrays. The common path (a job arrives to an empty queue,
    fits, runs and completes) is written inline in `run`; it books exactly what `start` and `close`
    book, in the same floating-point order, so a seed gives the same result either way."""

    def __init__(self, cfg: FleetConfig, tr: FleetTrace, model: FailureModel, tau: np.ndarray,
                 first_wall: list | None = None):
        self.cfg, self.tau = cfg, tau.tolist()
        self.schedule_of = job_schedules(cfg, self.tau)  # per job: its CheckpointSchedule (shared objects)
        self.tr = tr
        self.gpus, self.work, self.preemptible = tr.gpus.tolist(), tr.work_s.tolist(), tr.preemptible.tolist()
        # wall seconds of a job's first segment (no progress yet), shared by all runs
        self.first_wall = first_wall if first_wall is not None else first_segment_walls(cfg, tr, tau)
        n = len(self.gpus)
        self.acc = {k: [0.0] * n for k in CATEGORIES}
        self.base = [0.0] * n  # durable progress (compute seconds) at the start of the current segment
        self.seg: dict[int, tuple] = {}  # running job -> (start_t, restart cost, version)
        self.enter = [math.nan] * n  # queue entry time
        self.end = [math.nan] * n
        self.first_start = [math.nan] * n
        self.version = [0] * n
        self.requeued = [False] * n  # restarts pay requeue_cost (detect + restart) + restore
        self.requeue_cost = [0.0] * n
        self.may_preempt = [False] * n  # requeued after a failure: may preempt old preemptible jobs
        self.free = cfg.gpus
        self.preempt_retry_at = 0.0
        self.queue: deque[int] = deque()
        self.heap: list = []
        self.seq = 0
        self.c = dict(failures=0, job_failures=0, preemptions=0, idle_failures=0)

    def push(self, t, kind, a):
        heapq.heappush(self.heap, (t, self.seq, kind, a))
        self.seq += 1

    def start(self, j: int, t: float, cost: float) -> None:
        self.free -= self.gpus[j]
        if self.first_start[j] != self.first_start[j]:  # nan: first start
            self.first_start[j] = t
        self.acc["queued"][j] += t - self.enter[j]
        v = self.version[j] = self.version[j] + 1
        self.seg[j] = (t, cost, v)
        wall = self.schedule_of[j].wall_for_compute(self.work[j] - self.base[j])
        heapq.heappush(self.heap, (t + cost + wall, self.seq, DONE, (j, v)))
        self.seq += 1

    def close(self, j: int, t: float, rollback: bool) -> None:
        """End job j's segment at t: account it; roll back to the last checkpoint when interrupted."""
        t0, cost, _ = self.seg.pop(j)
        self.free += self.gpus[j]
        self.acc["restart"][j] += min(cost, t - t0)
        e = max(0.0, t - t0 - cost)
        schedule = self.schedule_of[j]
        comp = min(schedule.compute_done(e), self.work[j] - self.base[j])
        durable = schedule.durable(e)[1]
        self.acc["checkpoint_stall"][j] += e - comp
        if rollback:
            self.acc["lost"][j] += comp - min(durable, comp)
            self.base[j] += min(durable, comp)
        else:
            self.base[j] += comp

    def requeue(self, j: int, t: float, r: Response, after_failure: bool, position: int = 0) -> None:
        """Back into the queue at `position` (the head by default; the roll-back is booked by `close`), to
        pay r's detection and restart (plus the restore) when it starts again."""
        self.enter[j] = t
        self.requeued[j] = True
        self.requeue_cost[j] = r.detect_s + r.restart_s
        self.may_preempt[j] = after_failure
        self.queue.insert(position, j)

    def schedule(self, t: float) -> None:
        q = self.queue
        if not q:
            return
        cfg, gpus = self.cfg, self.gpus
        head = q[0]
        if self.may_preempt[head] and gpus[head] > self.free and t >= self.preempt_retry_at:
            self.preempt_for(head, t)
        scanned, i = 0, 0
        while i < len(q) and scanned < cfg.backfill_depth and self.free > 0:
            j = q[i]
            if gpus[j] <= self.free:
                del q[i]
                cost = self.requeue_cost[j] + cfg.restore_s if self.requeued[j] else 0.0
                self.start(j, t, cost)
            else:
                i += 1
            scanned += 1

    def preempt_for(self, j: int, t: float) -> None:
        need = self.gpus[j] - self.free
        old = [(s[0], k) for k, s in self.seg.items()
               if self.preemptible[k] and t - s[0] >= self.cfg.preemptible_after_s]
        if sum(self.gpus[k] for _, k in old) < need:  # preempting all of them would not make room
            self.preempt_retry_at = t + PREEMPT_RETRY_S
            return
        for _, k in sorted(old, reverse=True):  # most recently started first
            if need <= 0:
                break
            self.close(k, t, rollback=True)
            self.c["preemptions"] += 1
            need -= self.gpus[k]
            self.requeue(k, t, self.cfg.recovery.after_preemption(), after_failure=False, position=1)  # behind j

    def fail(self, t: float, cause: int, u: float, model: FailureModel) -> None:
        cfg = self.cfg
        self.c["failures"] += 1
        failure = failure_of(model.causes[cause])
        node_class = failure.node_lost
        busy = cfg.gpus - self.free  # GPUs held by running jobs (the pool's down GPUs count as free < 0)
        pick = u * cfg.gpus
        victim = None
        if self.seg and pick < busy:
            for k in self.seg:  # the job holding the pick-th busy GPU
                pick -= self.gpus[k]
                if pick < 0:
                    victim = k
                    break
        if node_class:
            self.free -= cfg.gpus_per_node
            self.push(t + cfg.repair_h * 3600.0, REPAIR, -1)
        if victim is None:
            self.c["idle_failures"] += 1
            return
        self.c["job_failures"] += 1
        r = cfg.recovery.respond(failure, replicas_left=0)  # RESTART_IN_PLACE or REPLACE_NODES: both roll back
        self.close(victim, t, rollback=r.rolls_back)
        if r.action == REPLACE_NODES:  # back through the queue, onto other GPUs
            self.requeue(victim, t, r, after_failure=True)
        else:  # restart in place on the same GPUs
            self.enter[victim] = t
            self.start(victim, t, r.detect_s + r.restart_s + cfg.restore_s)

    def run(self, fail_times: np.ndarray, fail_causes: np.ndarray, fail_u: np.ndarray, model: FailureModel) -> None:
        horizon = self.cfg.days * 86400.0
        for i in range(len(fail_times)):
            self.push(float(fail_times[i]), FAIL, i)
        arrivals = int(np.searchsorted(self.tr.submit_s, horizon))
        submit = self.tr.submit_s[:arrivals].tolist()
        a = 0
        heap, seg, queue = self.heap, self.seg, self.queue
        gpus, work, base, version = self.gpus, self.work, self.base, self.version
        first_wall, first_start, enter, end = self.first_wall, self.first_start, self.enter, self.end
        acc_restart, acc_stall = self.acc["restart"], self.acc["checkpoint_stall"]
        inf = math.inf
        heappop, heappush = heapq.heappop, heapq.heappush
        while True:
            # conditional expressions below are min()/max() spelled out (the same values; this loop
            # runs ~80k times per run and the calls dominated it)
            t_arr = submit[a] if a < arrivals else inf
            t_ev = heap[0][0] if heap else inf
            arrival = t_arr <= t_ev
            t = t_arr if arrival else t_ev
            if t >= horizon:
                break
            if arrival:
                enter[a] = t_arr
                if not queue and gpus[a] <= self.free:
                    # fast path: an empty queue and room, so `schedule` would start it now at no cost
                    # (the same bookkeeping as `start` with base 0 and cost 0)
                    self.free -= gpus[a]
                    first_start[a] = t
                    version[a] = 1
                    seg[a] = (t, 0.0, 1)
                    heappush(heap, (t + 0.0 + first_wall[a], self.seq, DONE, (a, 1)))
                    self.seq += 1
                    a += 1
                    continue
                queue.append(a)
                a += 1
            else:
                _, _, kind, x = heappop(heap)
                if kind == DONE:
                    j, v = x
                    if v != version[j] or j not in seg:
                        continue
                    # completion: `close(j, t, rollback=False)` inline. The segment was scheduled to end
                    # when its remaining compute was done, so it computed exactly that; the rest of its
                    # wall time was checkpoint stalls (clamped at 0 against rounding)
                    t0, cost, _ = seg.pop(j)
                    self.free += gpus[j]
                    ran = t - t0
                    acc_restart[j] += ran if ran < cost else cost
                    stall = ran - cost - (work[j] - base[j])
                    acc_stall[j] += stall if stall > 0.0 else 0.0
                    base[j] = work[j]
                    end[j] = t
                elif kind == FAIL:
                    self.fail(t, int(fail_causes[x]), float(fail_u[x]), model)
                else:
                    self.free += self.cfg.gpus_per_node
            if queue:
                self.schedule(t)
        for j in list(self.seg):
            self.close(j, horizon, rollback=False)
        for j in self.queue:
            self.acc["queued"][j] += horizon - self.enter[j]
        self.acc["useful"] = list(self.base)
        self.arrived = arrivals


def job_schedules(cfg: FleetConfig, tau: list[float]) -> list[CheckpointSchedule]:
    """Each job's checkpoint cadence as the CheckpointSchedule the job twins use: a `write_s` stall every
    tau compute seconds, durable when the stall ends (one object per distinct interval)."""
    by_tau = {t: CheckpointSchedule(tau_s=t, stall_s=cfg.write_s) for t in set(tau)}
    return [by_tau[t] for t in tau]


def first_segment_walls(cfg: FleetConfig, tr: FleetTrace, tau: np.ndarray) -> list[float]:
    """Wall seconds of each job's first segment (all its work, checkpoints on the way): what `start`
    computes for a job with no progress yet, computed once for all runs."""
    return [s.wall_for_compute(w) for s, w in zip(job_schedules(cfg, tau.tolist()), tr.work_s.tolist())]


def checkpoint_intervals(cfg: FleetConfig, tr: FleetTrace, model: FailureModel) -> np.ndarray:
    """Young's interval per job from its GPUs' share of the cluster failure rate."""
    per_gpu_s = model.rate_per_hour(cfg.gpus, cfg.gpus_per_node) / 3600.0 / cfg.gpus
    tau = np.full(len(tr.gpus), math.inf)
    if per_gpu_s > 0:
        for g in np.unique(tr.gpus):
            tau[tr.gpus == g] = interval_for("young", cfg.write_s, 1.0 / (per_gpu_s * float(g)))
    return tau


@dataclass
class FleetRunResult:
    """What summarise_fleet needs of one run, per arrived job (small enough to return from a worker)."""

    acc: dict
    end: list
    first_start: list
    arrived: int
    c: dict


def _run_one(cfg: FleetConfig, tr: FleetTrace, model: FailureModel, tau: np.ndarray, first_wall: list,
             rs: np.random.SeedSequence) -> FleetRunResult:
    rng = np.random.default_rng(rs)
    times_h, causes = model.draw(rng, cfg.days * 86400.0 / 3600.0, cfg.gpus, cfg.gpus_per_node)
    run = _FleetRun(cfg, tr, model, tau, first_wall)
    run.run(times_h * 3600.0, causes, rng.random(len(times_h)), model)
    n = run.arrived
    return FleetRunResult({k: v[:n] for k, v in run.acc.items()}, run.end[:n], run.first_start[:n], n, run.c)


_WORKER_ARGS: tuple = ()


def _worker_init(*args) -> None:
    global _WORKER_ARGS
    _WORKER_ARGS = args


def _worker_run(rs: np.random.SeedSequence) -> FleetRunResult:
    return _run_one(*_WORKER_ARGS, rs)


def simulate_fleet(cfg: FleetConfig, tr: FleetTrace, runs: int = 10, seed: int = 0, workers: int = 1) -> dict:
    """`runs` Monte-Carlo runs. The runs are independent (run i draws from stream i of the seed), so
    `workers` > 1 runs them in that many processes with the same result."""
    if not 1 <= runs <= 100000:
        raise SpecError("runs", "an integer in [1, 100000]", runs)
    if not 1 <= workers <= 256:
        raise SpecError("workers", "an integer in [1, 256]", workers)
    if tr.gpus.size and int(tr.gpus.max()) > cfg.gpus:
        raise SpecError("gpus", f"at least the trace's largest job ({int(tr.gpus.max())} GPUs)", cfg.gpus)
    model = load_failure_model(cfg.failure_model, "failure_model")
    model = model.scaled(cfg.failure_scale) if cfg.failure_scale != 1.0 else model
    tau = checkpoint_intervals(cfg, tr, model)
    args = (cfg, tr, model, tau, first_segment_walls(cfg, tr, tau))
    seeds = run_seeds(seed, runs)
    if workers == 1 or runs == 1:
        per_run = [_run_one(*args, rs) for rs in seeds]
    else:
        import multiprocessing  # noqa: PLC0415
        from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
        with ProcessPoolExecutor(min(workers, runs), mp_context=ctx, initializer=_worker_init, initargs=args) as pool:
            per_run = list(pool.map(_worker_run, seeds))
    return summarise_fleet(cfg, tr, per_run, runs, seed)
