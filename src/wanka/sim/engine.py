"""Deterministic discrete-event engine for one job on a cluster: failures, checkpoints, recovery.

Time is wall-clock seconds. Failure arrivals for the whole run are drawn up front from the
superposed Poisson process of all causes (wanka.reliability.failures); planned maintenance,
predicted drains and stragglers likewise. A heap orders them with follow-up events (repaired nodes
returning, replicas rejoining). Between events the job's progress, checkpoints and stalls follow in
closed form from the CheckpointSchedule, so checkpoints are never events. Ties break by insertion
order, so a seed fixes the result.

What a failure does to the job is `RecoveryPolicy.respond` (wanka.reliability.recovery), the one
recovery decision the multi-job and fleet twins apply too; `_Run.failure` books its answer.

A group cause (rack / leaf / spine, resolved on the job's nodes by wanka.reliability.failures.
resolve_groups) takes down every job node under one group: the failure picks one of the groups the
job touches, and recovery needs that many replacement nodes at once (waiting for the last of them),
or drops every replica those nodes hold (elastic, torchft). Such a failure restores from storage:
a peer-memory copy cannot be assumed to survive the loss of several neighbouring nodes.

Accounting (job seconds; x GPUs = GPU-seconds): wall = useful + lost_work + checkpoint_stall +
restart + waiting_for_spares + planned + degraded, where degraded is compute time not turned into
full-speed progress (fewer replicas, stragglers). ETTR = useful / wall (reliability.md section 0:
productive runtime over wall-clock time, with productive time counted at full speed).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from wanka.reliability.recovery import DROP_REPLICAS, REPLACE_NODES, SHRINK, SparePool, StepCommits
from wanka.sim.config import TwinConfig
from wanka.sim.segment import run_segment

FAIL, PLANNED, DRAIN, FALSE_DRAIN, GROW, REJOIN, SLOW_ON, SLOW_OFF = range(8)
CATEGORIES = ("useful", "lost_work", "discarded_step", "checkpoint_stall", "restart", "waiting_for_spares", "planned",
              "degraded")


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


class _Run:
    """State of one Monte-Carlo run."""

    def __init__(self, cfg: TwinConfig, rng: np.random.Generator, trace: bool):
        self.cfg, self.rng = cfg, rng
        self.acc = dict.fromkeys(CATEGORIES, 0.0)
        self.t_resume = 0.0  # compute (re)starts here
        self.acc_until = 0.0
        self.down = ("restart", 0.0, 0.0)  # (category, end of first phase, end of waiting)
        self.down_start = 0.0
        self.seg_base = 0.0  # progress (full-speed seconds) at segment start
        self.mem_abs = self.sto_abs = 0.0  # durable progress per level
        self.hw_ready = 0.0
        self.pending_cost = 0.0
        self.dp = cfg.dp
        self.slow = 0
        self.speed = 1.0
        self.pool = SparePool(cfg.spares)
        self.heap: list = []
        self.seq = 0
        self.n_cause = np.zeros(len(cfg.failures.causes), dtype=np.int64)
        self.rec = cfg.recovery
        self.steps = StepCommits(cfg.step_time_s)  # step-level commit semantics (torchft) when step_time_s > 0
        self.replica_s = 0.0  # integral of healthy (in-quorum) replicas over wall time
        self.c = dict(planned=0, manual=0, drains=0, false_drains=0, averted=0, shrinks=0, stragglers=0,
                      correlated=0, blast_nodes=0)
        self.trace: list | None = [] if trace else None

    # ---- time accounting ---------------------------------------------------------------------
    def push(self, t: float, kind: int, data: int = -1) -> None:
        heapq.heappush(self.heap, (t, self.seq, kind, data))
        self.seq += 1

    def running(self, t: float) -> bool:
        return t >= self.t_resume

    def close(self, t: float) -> float:
        """Account [acc_until, t) and return progress at t (the segment then restarts at t)."""
        cat, a, b = self.down
        lo = self.acc_until
        self.replica_s += self.dp * max(0.0, t - lo)
        if lo < self.t_resume:
            hi = min(t, self.t_resume)
            self.acc[cat] += _overlap(lo, a, lo, hi) + _overlap(b, self.t_resume, lo, hi)
            self.acc["waiting_for_spares"] += _overlap(a, b, lo, hi)
            if self.trace is not None and hi > lo:
                self.trace.append((lo, hi, cat if hi <= a or hi > b else "waiting_for_spares", self.seg_base))
        progress = self.seg_base
        if t > self.t_resume:
            done, mem, sto = run_segment(self.cfg.schedule, t - self.t_resume, self.speed, self.acc, self.steps)
            progress = self.seg_base + done
            self.mem_abs = max(self.mem_abs, self.seg_base + mem)
            self.sto_abs = max(self.sto_abs, self.seg_base + sto)
            if self.trace is not None:
                self.trace.append((self.t_resume, t, "running", progress))
            self.t_resume = t
            self.seg_base = progress
        self.acc_until = t
        return progress

    def discard_step(self) -> None:
        """Per-step fault tolerance: the step in flight is discarded for every replica (StepCommits)."""
        lost = self.speed * self.steps.discard()
        self.acc["discarded_step"] += lost
        self.seg_base -= lost
        self.mem_abs, self.sto_abs = min(self.mem_abs, self.seg_base), min(self.sto_abs, self.seg_base)

    def set_speed(self) -> None:
        sp = self.cfg.speed_of_dp[self.dp] if self.cfg.speed_of_dp else self.dp / self.cfg.dp
        self.speed = sp / (self.cfg.stragglers.slowdown if self.slow else 1.0)

    def go_down(self, t: float, cat: str, first: float, hw: float, cost: float) -> None:
        """Down from t: `first` s of `cat`, then wait for hardware until hw, then `cost` s of `cat`."""
        a = t + first
        b = max(a, hw)
        self.down = (cat, a, b)
        self.t_resume = b + cost
        self.acc_until = t

    def take_node(self, t_need: float, returns_at: float) -> float:
        return self.pool.take(t_need, returns_at)

    # ---- events ------------------------------------------------------------------------------
    def failure(self, t: float, cause: int, manual: bool, u_group: float = 0.0) -> None:
        """Apply RecoveryPolicy.respond (wanka.reliability.recovery), the one recovery decision."""
        cfg = self.cfg
        self.n_cause[cause] += 1
        failure = (cfg.cause_manual_failure if manual else cfg.cause_failure)[cause]
        repair = cfg.manual_repair_s if manual else float(cfg.cause_repair_s[cause])
        lost, hit = 1, 1  # nodes the failure takes down, data-parallel replicas they hold
        blast = cfg.cause_blast[cause] if cfg.cause_blast else None
        if blast is not None:  # a rack / leaf / spine group: every job node under it is down
            lost, hit = (int(v) for v in blast[min(int(u_group * len(blast)), len(blast) - 1)])
            self.c["correlated"] += 1
            self.c["blast_nodes"] += lost
        was_down = not self.running(t)
        progress = self.close(t)
        if manual:
            self.c["manual"] += 1
        ready = True
        if failure.node_lost:
            detected = t + self.rec.detect_time_s(failure)
            ready = self.pool.ready_by(detected) if lost == 1 else self.pool.ready_count(detected) >= lost
        r = self.rec.respond(failure, self.dp - hit, spare_ready=ready)
        detect = r.detect_s
        if r.action == DROP_REPLICAS:
            # per-step replica fault tolerance: the step in flight is discarded, the replicas drop out and
            # the others go on from the last committed step (no rollback); the dropped replicas heal
            # (heal_s, state transfer from a live peer) once their nodes are ready, then rejoin
            self.discard_step()
            self.dp -= hit
            avail = max(self.take_node(t + detect, t + repair) for _ in range(lost))
            for _ in range(hit):
                self.push(max(t + detect, avail) + self.rec.heal_s, REJOIN)
            # the survivors' collective times out and a new quorum forms (reconfig_s); a failure during a
            # quorum change starts it again
            if self.t_resume < t + self.rec.reconfig_s:
                self.go_down(t, "restart", self.rec.reconfig_s, t, 0.0)
            self.set_speed()
            return
        # every other response rolls back to the last durable checkpoint
        covered = (cfg.schedule.has_memory and not manual and lost == 1
                   and (cfg.mem_covers_node if failure.node_lost else cfg.mem_covers_restart))
        restore = self.mem_abs if covered else self.sto_abs
        self.steps.restart_from_checkpoint()
        self.acc["lost_work"] += progress - restore
        self.seg_base = self.mem_abs = restore
        if r.action == SHRINK:  # continue with fewer replicas; grow back when the nodes return
            back = max(self.pool.lend_until_return(t + repair) for _ in range(lost))
            for _ in range(hit):
                self.push(back, GROW)
            self.dp -= hit
            self.c["shrinks"] += 1
        elif r.action == REPLACE_NODES:  # all `lost` replacement nodes are needed before the job can restart
            for _ in range(lost):
                self.hw_ready = max(self.hw_ready, self.take_node(t + detect, t + repair))
        cost = r.restart_s
        if was_down:
            cost = max(cost, self.pending_cost)
        self.pending_cost = cost
        self.set_speed()
        self.go_down(t, "restart", detect, self.hw_ready,
                     cost + (cfg.mem_restore_s if covered else cfg.sto_restore_s))

    def planned_stop(self, t: float, cat: str, extra_s: float, hw_returns_at: float | None) -> bool:
        """Checkpoint, stop and restart (maintenance, drain, eviction, growth). False if already down."""
        if not self.running(t):
            return False
        cfg = self.cfg
        progress = self.close(t)
        self.mem_abs = self.sto_abs = self.seg_base = progress
        hw = t
        if hw_returns_at is not None:
            hw = self.take_node(t + cfg.flush_s, hw_returns_at)
        self.set_speed()
        self.pending_cost = 0.0
        self.go_down(t, cat, cfg.flush_s, hw, extra_s + cfg.sto_restore_s)
        return True

    def run(self, events: list) -> dict:
        cfg = self.cfg
        self.heap = events
        heapq.heapify(self.heap)
        self.seq = len(events)
        averted: set[int] = set()
        end = cfg.duration_s
        while self.heap and self.heap[0][0] < end:
            t, _, kind, data = heapq.heappop(self.heap)
            if kind == FAIL:
                idx, cause, u_thin, u_manual, u_group = data
                if idx in averted or u_thin * cfg.dp >= self.dp:  # thinning: only active replicas fail
                    continue
                self.failure(t, cause, u_manual < cfg.failures.manual_fraction, u_group)
            elif kind == PLANNED:
                self.c["planned"] += 1
                self.planned_stop(t, "planned", cfg.planned_restart_s, None)
            elif kind == DRAIN:
                idx, fail_t = data
                if self.planned_stop(t, "planned", cfg.prediction.drain_s + self.rec.restart_s, fail_t + cfg.repair_s):
                    averted.add(idx)
                    self.c["drains"] += 1
            elif kind == FALSE_DRAIN:
                if self.planned_stop(t, "planned", cfg.prediction.drain_s + self.rec.restart_s, t + cfg.prediction.false_return_s):
                    self.c["false_drains"] += 1
            elif kind == GROW:
                self.dp += 1
                if not self.planned_stop(t, "restart", self.rec.resize_cost_s(0.0), None):  # + restore
                    self.close(t)
                    self.set_speed()
            elif kind in (REJOIN, SLOW_ON, SLOW_OFF):
                running = self.running(t)
                self.close(t)
                if kind == REJOIN:
                    self.dp += 1
                    if running and self.rec.join_s > 0:  # the new quorum re-initialises every process group
                        self.go_down(t, "restart", self.rec.join_s, t, 0.0)
                elif kind == SLOW_ON:
                    self.slow += 1
                    self.c["stragglers"] += 1
                else:
                    self.slow -= 1
                    if cfg.stragglers.evict:
                        self.planned_stop(t, "restart", self.rec.swap_s + self.rec.restart_s, t + cfg.repair_s)
                self.set_speed()
        useful = self.close(end)
        self.acc["useful"] = useful
        self.c["averted"] = len(averted)
        self.c.update(swaps=self.pool.swaps, waits=self.pool.waits, pool_min=self.pool.min_available)
        self.c.update(mean_replicas=self.replica_s / end, committed_steps=self.steps.committed,
                      discarded_steps=self.steps.discarded)
        return {"acc": self.acc, "by_cause": self.n_cause, "counts": self.c, "trace": self.trace}


def draw_events(cfg: TwinConfig, rng: np.random.Generator) -> list:
    """All exogenous events of one run, drawn up front (vectorised per process)."""
    hours = cfg.duration_s / 3600.0
    times_h, causes = cfg.failures.draw(rng, hours, cfg.gpus, cfg.gpus_per_node)
    times = times_h * 3600.0
    k = len(times)
    u = rng.random((2, k))
    ug = rng.random(k) if cfg.has_groups else np.zeros(k)  # which group a group failure hits
    events: list = [(float(times[i]), i, FAIL, (i, int(causes[i]), float(u[0, i]), float(u[1, i]), float(ug[i])))
                    for i in range(k)]
    seq = k
    n_pl = rng.poisson(cfg.planned_per_s * cfg.duration_s)
    for t in np.sort(rng.random(n_pl)) * cfg.duration_s:
        events.append((float(t), seq, PLANNED, -1))
        seq += 1
    pr = cfg.prediction
    if pr.enabled and k:
        share = np.array([c.precursor_share for c in cfg.failures.causes])[causes]
        hit = rng.random(k) < share * pr.recall
        for i in np.nonzero(hit)[0]:
            t_drain = times[i] - pr.lead_s
            if t_drain >= 0:
                events.append((float(t_drain), seq, DRAIN, (int(i), float(times[i]))))
                seq += 1
        share_mean = float((cfg.rate_per_s * [c.precursor_share for c in cfg.failures.causes]).sum())
        fp_rate = share_mean * pr.recall * (1.0 - pr.precision) / pr.precision
        if pr.false_alarms_per_node_s is not None:
            fp_rate = pr.false_alarms_per_node_s * cfg.nodes
        for t in np.sort(rng.random(rng.poisson(fp_rate * cfg.duration_s))) * cfg.duration_s:
            events.append((float(t), seq, FALSE_DRAIN, -1))
            seq += 1
    if cfg.kill_every_s > 0:  # a kill loop: one live replica per interval, the model's last cause
        kill = len(cfg.failures.causes) - 1
        t = rng.random() * cfg.kill_every_s  # the loop starts at a random phase of the job's steps
        while t < cfg.duration_s:
            events.append((float(t), seq, FAIL, (-1 - seq, kill, 0.0, 1.0, 0.0)))
            seq += 1
            t += cfg.kill_every_s * (1.0 + cfg.kill_jitter * (2.0 * rng.random() - 1.0))
    st = cfg.stragglers
    if st.per_node_s > 0:
        for t in np.sort(rng.random(rng.poisson(st.per_node_s * cfg.nodes * cfg.duration_s))) * cfg.duration_s:
            events.append((float(t), seq, SLOW_ON, -1))
            events.append((float(t) + st.detect_s, seq + 1, SLOW_OFF, -1))
            seq += 2
    return events


def simulate_run(cfg: TwinConfig, seed: np.random.SeedSequence, trace: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    run = _Run(cfg, rng, trace)
    out = run.run(draw_events(cfg, rng))
    wall = cfg.duration_s
    total = sum(out["acc"].values())
    assert math.isclose(total, wall, rel_tol=1e-6, abs_tol=1e-3), (total, wall)
    return out
