"""The scheduler: a clock-free state machine that the trace replay and the digital twin both drive.

    s = Scheduler(cluster, policy="topo-bestfit", queue="fifo", backfill=True)
    s.submit(job, now_s); decisions = s.schedule(now_s); s.finish(job_id, now_s)

`schedule` walks the queue in order and starts every job that fits until the first one that does not
(the head). The head may make room by shrinking elastic jobs, reclaiming GPUs that other tenants
borrowed, or preempting lower-priority jobs (preemption.py). With EASY backfill (Lifka, "The ANL/IBM
SP scheduling system", JSSPP 1995) the head gets a reservation at the earliest time enough GPUs free
up, counted from the running jobs' expected ends, and later jobs start now if they fit and either end
before that time or use only GPUs the head will not need. At most `depth` queued jobs are tested per
call (Slurm's default_queue_depth is 100, slurm.conf).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

from wanka.errors import SpecError
from wanka.sched.health import NodeHealth
from wanka.sched.job import Decision, Job, Start
from wanka.sched.jobstate import JobState
from wanka.sched.placement import PLACEMENTS, minimal_spread, shape, spread, topo_bestfit
from wanka.sched.preemption import RoomMaker
from wanka.sched.speed import SpeedModel
from wanka.sched.state import FreeGPUs

QUEUES = ("fifo", "priority", "sjf")


class Scheduler(NodeHealth, RoomMaker):
    def __init__(self, cluster, policy: str = "topo-bestfit", queue: str = "fifo", backfill: bool = True,
                 quotas: dict[str, int] | None = None, spare_nodes: int = 0, *, borrowing: bool = True,
                 preemption: bool = True, depth: int = 100, speed: SpeedModel | None = None,
                 spread_wait_s: float = 0.0):
        if policy not in PLACEMENTS:
            raise SpecError("policy", " | ".join(PLACEMENTS), policy)
        if queue not in QUEUES:
            raise SpecError("queue", " | ".join(QUEUES), queue)
        if depth < 1:
            raise SpecError("depth", "an integer >= 1", depth)
        if not (isinstance(spread_wait_s, (int, float)) and 0 <= spread_wait_s < math.inf):
            raise SpecError("spread_wait_s", "a number of seconds >= 0", spread_wait_s)
        self.spread_wait_s = float(spread_wait_s)
        self._wake_s = math.inf  # when a gang waiting for a better placement runs out of patience
        self.cluster, self.policy, self.queue_order, self.backfill = cluster, policy, queue, backfill
        self.borrowing, self.preemption, self.depth = borrowing, preemption, depth
        self.free = FreeGPUs(cluster)
        self._place = PLACEMENTS[policy]
        self.speed_model = speed if speed is not None else SpeedModel(cluster)
        self.jobs: dict[str, JobState] = {}
        self.queue: list[tuple[tuple, str]] = []  # sorted (key, job id)
        self.running: dict[str, JobState] = {}
        self._slots: list[JobState] = []
        self._seq = 0
        self.head: str | None = None  # the first queued job that did not fit at the last schedule()
        self._running_prio: Counter = Counter()  # priorities of running preemptible jobs
        self.allocated_gpus = 0
        self.effective_gpus = 0.0  # sum over running jobs of GPUs * speed_factor
        self.stats = Counter()
        self._growable: set[str] = set()  # running elastic jobs below their max_gpus
        self._elastic_running: set[str] = set()
        self._ends: list[tuple[float, int]] = []  # sorted (expected end, slot) of running jobs
        self._dirty = True  # GPUs were freed since the last schedule(): test the whole queue head
        self._fresh: list[str] = []  # jobs queued since the last schedule()
        self._reserve: list[float] | None = None  # the head's [shadow time, spare GPUs] (EASY)
        self._now = -math.inf
        self._minimal: dict[int, tuple[int, ...]] = {}
        self._best_ids: dict[int, tuple[int, ...]] = {}
        self._set_quotas(quotas)
        NodeHealth.__init__(self, spare_nodes)

    def _set_quotas(self, quotas: dict[str, int] | None) -> None:
        if quotas is not None:
            for tenant, q in quotas.items():
                if not isinstance(q, int) or isinstance(q, bool) or q < 0:
                    raise SpecError(f"quotas.{tenant}", "an integer number of GPUs >= 0", q)
        self.quotas = dict(quotas) if quotas is not None else None
        self.cohort_quota = sum(self.quotas.values()) if self.quotas else 0
        self.usage: Counter = Counter()  # GPUs held per tenant
        self.cohort_usage = 0

    # ---- the contract ------------------------------------------------------------------------
    def submit(self, job: Job, now_s: float) -> None:
        if job.id in self.jobs:
            raise SpecError("job.id", "a job id not submitted before", job.id)
        if self.quotas is not None and job.tenant not in self.quotas:
            raise SpecError(f"job {job.id!r}.tenant", f"a tenant with a quota ({', '.join(self.quotas)})", job.tenant)
        if job.min_gpus_ > self.cluster.gpus:
            raise SpecError(f"job {job.id!r}.gpus", f"at most the cluster's {self.cluster.gpus} GPUs", job.min_gpus_)
        if job.topology != "best-effort":  # a required unit too small for the gang: it would wait forever
            lvl = self.free.level(job.topology)
            unit = self.free.gpn if lvl < 0 else int(self.free.levels[lvl].capacity.max())
            if job.min_gpus_ > unit:
                raise SpecError(f"job {job.id!r}.topology", f"a unit that holds {job.min_gpus_} GPUs (the largest "
                                f"{job.topology} unit of {self.cluster.name} holds {unit}) or best-effort", job.topology)
        key = self._key(job)
        js = JobState(job=job, slot=len(self._slots), key=key, queued_since_s=now_s)
        self._slots.append(js)
        self.jobs[job.id] = js
        bisect.insort(self.queue, (key, job.id))
        self._fresh.append(job.id)

    def schedule(self, now_s: float) -> list[Decision]:
        out: list[Decision] = []
        self._now = now_s
        cands = self._candidates()
        self._dirty, self._fresh = False, []
        started = self._pass(cands, now_s, out)
        for jid in started:
            js = self.jobs[jid]
            del self.queue[bisect.bisect_left(self.queue, (js.key, jid))]
        if not self.queue:
            self._grow(now_s, out)
        return out

    def _candidates(self) -> list[str]:
        """The queued jobs to test: the first `depth` after anything freed GPUs (a full pass);
        otherwise only the jobs submitted since the last call, since nothing else can have changed."""
        def full() -> list[str]:
            self.head, self._reserve = None, None
            return [jid for _, jid in self.queue[:self.depth]]

        if self._dirty or self._now >= self._wake_s:
            self._wake_s = math.inf
            return full()
        out = []
        for jid in sorted(set(self._fresh), key=lambda j: self.jobs[j].key):
            js = self.jobs[jid]
            if js.status != "queued" or bisect.bisect_left(self.queue, (js.key, jid)) >= self.depth:
                continue
            if self.head is not None and js.key < self.jobs[self.head].key:  # a new head: full pass
                return full()
            out.append(jid)
        return out

    def _pass(self, cands: list[str], now_s: float, out: list[Decision]) -> list[str]:
        started = []
        for jid in cands:
            js = self.jobs[jid]
            if js.status != "queued":
                continue
            need = js.job.min_gpus_
            if not self._quota_ok(js.job.tenant, need):
                continue  # waits for its tenant's quota, does not block the others
            if self.head is None:
                placed = self._try_place(js)
                if placed is None and self._make_room(js, now_s, out):
                    placed = self._try_place(js)
                if placed is not None and self._patient(js, placed, now_s):
                    placed = None
                if placed is not None:
                    self._start(js, placed, now_s, out)
                    started.append(jid)
                    continue
                self.head = jid
                if not self.backfill:
                    break
                self._reserve = self._reservation(need, now_s)
                continue
            if not self.backfill or self.free.total_avail == 0:
                break
            if need > self.free.total_avail:
                continue
            shadow, extra = self._reserve
            ends_in_time = now_s + js.remaining_work_s() / (need / js.job.gpus) <= shadow
            if not ends_in_time and need > extra:
                continue
            placed = self._try_place(js, None if ends_in_time else need)
            if placed is None or self._patient(js, placed, now_s):
                continue
            if not ends_in_time:
                self._reserve[1] -= need
            self._start(js, placed, now_s, out)
            started.append(jid)
            self.stats["backfilled"] += 1
        return started

    def finish(self, job_id: str, now_s: float) -> None:
        js = self._running(job_id)
        self._release(js)
        js.status, js.end_s = "done", now_s
        self.stats["finished"] += 1

    def withdraw(self, job_id: str, now_s: float) -> None:
        """A queued job leaves the queue without running (cancelled by its owner); a running one finishes."""
        js = self.jobs[job_id]
        if js.status == "running":
            self.finish(job_id, now_s)
        elif js.status == "queued":
            del self.queue[bisect.bisect_left(self.queue, (js.key, job_id))]
            js.status, js.end_s = "done", now_s
            if self.head == job_id:
                self.head, self._reserve = None, None
            self._dirty = True

    # ---- queue and quotas --------------------------------------------------------------------
    def _key(self, job: Job) -> tuple:
        self._seq += 1
        if self.queue_order == "priority":
            return (-job.priority, job.submit_s, self._seq)
        if self.queue_order == "sjf":
            d = math.inf if job.duration_s is None else job.duration_s * job.gpus
            return (d, job.submit_s, self._seq)  # shortest GPU-time first
        return (job.submit_s, self._seq)

    def _quota_ok(self, tenant: str, k: int) -> bool:
        return k <= self._quota_headroom(tenant)

    def _quota_headroom(self, tenant: str) -> float:
        """GPUs the tenant may still take: its own idle quota, or the cohort's when borrowing."""
        if self.quotas is None:
            return math.inf
        own = self.quotas[tenant] - self.usage[tenant]
        return max(own, self.cohort_quota - self.cohort_usage) if self.borrowing else own

    def _requeue(self, js: JobState, now_s: float) -> None:
        js.status = "queued"
        js.queued_since_s = now_s
        bisect.insort(self.queue, (js.key, js.job.id))
        self._fresh.append(js.job.id)

    def _reservation(self, need: int, now_s: float) -> list[float]:
        """EASY: earliest time `need` GPUs are free (counting only), and the GPUs spare at that time."""
        free = self.free.total_avail
        for end, slot in self._ends:
            if not math.isfinite(end):
                break
            free += self._slots[slot].gpus_held
            if free >= need:
                return [max(now_s, end), free - need]
        return [math.inf, 0]

    # ---- placement ---------------------------------------------------------------------------
    def _try_place(self, js: JobState, k: int | None = None):
        job = js.job
        cap = self.free.level(job.topology)
        if k is not None:
            return self._place(self.free, k, cap)
        if not job.elastic:
            return self._place(self.free, job.gpus, cap)
        top = int(min(job.max_gpus_, self.free.total_avail, self._quota_headroom(job.tenant)))
        for size in dict.fromkeys((top, job.gpus, job.min_gpus_)):
            if job.min_gpus_ <= size <= top:
                placed = self._place(self.free, size, cap)
                if placed is not None:
                    return placed
        return None

    def _patient(self, js: JobState, placed, now_s: float) -> bool:
        """Wait for a minimal-spread placement, at most `spread_wait_s` after (re)queueing
        (Slurm `--switches=N@max-wait`, `max_switch_wait` default 300 s, slurm.conf)."""
        if self.spread_wait_s <= 0:
            return False
        k = sum(n for _, n in placed)
        if k <= 1:
            return False
        deadline = js.queued_since_s + self.spread_wait_s
        if now_s >= deadline or spread(self.free, [n for n, _ in placed]) == self.minimal_spread(k):
            return False
        self._wake_s = min(self._wake_s, deadline)
        self.stats["spread_waits"] += 1
        return True

    def next_wakeup_s(self) -> float | None:
        """When schedule() should be called again even if nothing else happens (a gang waiting for a
        better placement runs out of patience); None if never."""
        return None if math.isinf(self._wake_s) else self._wake_s

    def best_ids(self, k: int) -> tuple[int, ...]:
        """A minimal-spread placement of k GPUs on the empty cluster (the speed factor's reference)."""
        if k not in self._best_ids:
            empty = FreeGPUs(self.cluster)
            placed = topo_bestfit(empty, k, len(empty.levels) - 1)
            self._best_ids[k] = tuple(n * empty.gpn + i for n, m in placed for i in range(m))
        return self._best_ids[k]

    def minimal_spread(self, k: int) -> tuple[int, ...]:
        if k not in self._minimal:
            self._minimal[k] = minimal_spread(self.free, k)
        return self._minimal[k]

    def _start(self, js: JobState, placed, now_s: float, out: list[Decision]) -> None:
        ids: list[int] = []
        for node, k in placed:
            ids += self.free.take(node, k, js.slot)
            js.nodes[node] = js.nodes.get(node, 0) + k
        k = len(ids)
        speed = self._speed(ids, js.nodes)
        js.begin_segment(now_s, ids, speed, js.saved_work_s)
        js.status = "running"
        js.starts += 1
        if js.first_start_s is None:
            js.first_start_s = now_s
        self.running[js.job.id] = js
        self._account(js, +1)
        self.stats["starts"] += 1
        if k > 1:
            self.stats["gang_starts"] += 1
            self.stats["gang_minimal"] += spread(self.free, list(js.nodes)) == self.minimal_spread(k)
        out.append(Start(js.job.id, js.gpu_ids, speed))

    def _speed(self, ids, nodes: dict[int, int]) -> float:
        if len(ids) <= 1:
            return 1.0
        return self.speed_model.factor(ids, self.best_ids(len(ids)), shape(self.free, nodes))

    def _account(self, js: JobState, sign: int) -> None:
        """Add (+1) or remove (-1) a running job's GPUs from every running total."""
        end = js.expected_end_s()
        item = (math.inf if end is None else end, js.slot)
        if sign > 0:
            bisect.insort(self._ends, item)
            js.end_key = item
        else:
            del self._ends[bisect.bisect_left(self._ends, js.end_key)]
            self._dirty = True
        k = js.gpus_held * sign
        self.allocated_gpus += k
        self.effective_gpus += k * js.speed
        tenant = js.job.tenant
        self.usage[tenant] += k
        self.cohort_usage += k
        if sign > 0:
            js.borrowing = self.quotas is not None and self.usage[tenant] > self.quotas[tenant]
        if js.job.preemptible:
            self._running_prio[js.job.priority] += sign
        if js.job.elastic:
            (self._elastic_running.add if sign > 0 else self._elastic_running.discard)(js.job.id)
            if js.status == "running" and 0 < js.gpus_held < js.job.max_gpus_ and sign > 0:
                self._growable.add(js.job.id)
            else:
                self._growable.discard(js.job.id)

    def _release(self, js: JobState) -> None:
        self._account(js, -1)
        self.free.give_back(js.gpu_ids)
        js.gpu_ids, js.nodes = (), {}
        del self.running[js.job.id]

    def _running(self, job_id: str) -> JobState:
        js = self.running.get(job_id)
        if js is None:
            raise SpecError("job_id", "the id of a running job", job_id)
        return js

    def _stop(self, js: JobState, now_s: float) -> None:
        """Stop a running job (preempted or lost a node): it resumes from its last checkpoint."""
        saved = js.checkpointed_work(now_s)
        js.lost_work_s += js.work_done(now_s) - saved
        js.saved_work_s = saved
        self._release(js)
        self._requeue(js, now_s)

    # ---- views for the replay and the twin ---------------------------------------------------
    def expected_end_s(self, job_id: str) -> float | None:
        return self._running(job_id).expected_end_s()

    def job_state(self, job_id: str) -> JobState:
        return self.jobs[job_id]

    def fragmentation(self) -> tuple[int, int]:
        """(free GPUs the head-of-queue gang cannot use at minimal spread, free GPUs).

        A gang of g GPUs at minimal spread needs nodes with at least min(g, gpus_per_node) free GPUs;
        free GPUs on schedulable nodes with fewer cannot serve it (node-level fragmentation as in
        Kant's GPU node fragmentation ratio and FGD, ATC'23; sched_network.md section 2.3).
        """
        free = self.free.total_avail
        if self.head is None:
            return 0, free
        per = min(self.jobs[self.head].job.min_gpus_, self.free.gpn)
        avail = self.free.avail
        return int(avail[avail < per].sum()), free
