"""Making room for the head of the queue: elastic shrink, quota reclaim, priority preemption, growth.

In this order, cheapest first (docs/sched.md "Preemption"):
1. shrink elastic jobs of no higher priority towards their min_gpus (a planned resize: the job
   checkpoints first and loses no work, as AdaptDL/Pollux re-scale through checkpoint-restart);
2. preempt victims: jobs of tenants that borrow beyond their quota when the head's tenant is within
   its own (Kueue cohorts, `reclaimWithinCohort`), and preemptible jobs of lower priority (Kueue
   `withinClusterQueue: LowerPriority`). Victims go lowest priority first, then least work lost;
   a borrower is reclaimed only down to its quota. A victim loses the work since its last
   checkpoint and waits in the queue with its original place.
Preemption happens only if the head then fits; otherwise nothing is touched. When the queue is
empty, elastic jobs grow towards max_gpus on idle GPUs.
"""

from __future__ import annotations

from collections import Counter

from wanka.sched.job import Preempt, Resize


class RoomMaker:
    def _make_room(self, js, now_s: float, out: list) -> bool:
        need = js.job.min_gpus_
        if self._shrink_for(js, need, now_s, out) and self._try_place(js) is not None:
            return True
        if not self.preemption:
            return False
        victims = self._victims(js, need, now_s)
        if not victims or need > self.free.total_avail + sum(v.gpus_held for v in victims):
            return False
        chosen, taken = [], Counter()
        for v in victims:
            tenant = v.job.tenant
            if v.job.priority >= js.job.priority:  # a reclaim victim: only down to its quota
                if self.usage[tenant] - taken[tenant] <= self.quotas[tenant]:
                    continue
            chosen.append((v, v.gpu_ids))
            taken[tenant] += v.gpus_held
            self.free.give_back(v.gpu_ids)  # tentatively
            if self.free.total_avail >= need and self._try_place(js) is not None:
                for w, ids in chosen:
                    self.free.take_ids(ids, w.slot)
                for w, _ in chosen:
                    self._stop(w, now_s)
                    w.preemptions += 1
                    self.stats["preemptions"] += 1
                    out.append(Preempt(w.job.id))
                return True
        for w, ids in chosen:  # the head still does not fit: undo
            self.free.take_ids(ids, w.slot)
        return False

    def _victims(self, js, need: int, now_s: float) -> list:
        prio = js.job.priority
        lower = any(c > 0 and p < prio for p, c in self._running_prio.items())
        reclaim = (self.quotas is not None and self.usage[js.job.tenant] + need <= self.quotas[js.job.tenant]
                   and any(self.usage[t] > q for t, q in self.quotas.items() if t != js.job.tenant))
        if not (lower or reclaim):
            return []
        out = []
        for v in self.running.values():
            if not v.job.preemptible:
                continue
            tenant = v.job.tenant
            borrower = reclaim and tenant != js.job.tenant and self.usage[tenant] > self.quotas[tenant]
            if v.job.priority < prio or borrower:
                lost = v.work_done(now_s) - v.checkpointed_work(now_s)
                out.append((v.job.priority, lost, -v.seg_start_s, v.job.id, v))
        out.sort(key=lambda t: t[:4])
        return [t[-1] for t in out]

    # ---- elastic -----------------------------------------------------------------------------
    def _shrink_for(self, js, need: int, now_s: float, out: list) -> bool:
        cands = [e for e in map(self.running.get, self._elastic_running)
                 if e.gpus_held > e.job.min_gpus_ and e.job.priority <= js.job.priority]
        if not cands or self.free.total_avail + sum(e.gpus_held - e.job.min_gpus_ for e in cands) < need:
            return False
        cands.sort(key=lambda e: (e.job.priority, -e.gpus_held, e.job.id))
        for e in cands:
            short = need - self.free.total_avail
            if short <= 0:
                break
            drop = min(e.gpus_held - e.job.min_gpus_, short)
            self._resize(e, self._drop_ids(e, drop), now_s, out)
        return True

    def _drop_ids(self, e, drop: int) -> tuple[int, ...]:
        """Keep the job's GPUs minus `drop`, taken from the nodes where it holds fewest."""
        gpn = self.free.gpn
        by_node = sorted(e.nodes.items(), key=lambda kv: (kv[1], kv[0]))
        gone: set[int] = set()
        for node, k in by_node:
            if len(gone) >= drop:
                break
            mine = [i for i in e.gpu_ids if i // gpn == node]
            gone.update(mine[-min(k, drop - len(gone)):])
        return tuple(i for i in e.gpu_ids if i not in gone)

    def _grow(self, now_s: float, out: list) -> None:
        if not self._growable or self.free.total_avail == 0:
            return
        top = len(self.free.levels) - 1
        for jid in sorted(self._growable, key=lambda j: self.jobs[j].key):
            e = self.jobs[jid]
            extra = int(min(e.job.max_gpus_ - e.gpus_held, self.free.total_avail,
                            max(0, self._quota_headroom(e.job.tenant))))
            while extra > 0:
                placed = self._place(self.free, extra, top)
                if placed is not None:
                    new = [i for node, k in placed for i in self.free.take(node, k, e.slot)]
                    self.free.give_back(new)  # _resize takes them again with the accounting
                    self._resize(e, e.gpu_ids + tuple(new), now_s, out)
                    break
                extra //= 2

    def _resize(self, e, ids: tuple[int, ...], now_s: float, out: list) -> None:
        """A planned resize: checkpoint now (no work lost), then continue on `ids`."""
        work = e.work_done(now_s)
        old = set(e.gpu_ids)
        self._account(e, -1)
        self.free.give_back([i for i in e.gpu_ids if i not in set(ids)])
        self.free.take_ids([i for i in ids if i not in old], e.slot)
        gpn = self.free.gpn
        e.nodes = dict(Counter(i // gpn for i in ids))
        speed = self._speed(ids, e.nodes)
        e.saved_work_s = work
        e.begin_segment(now_s, ids, speed, work)
        self._account(e, +1)
        self.stats["resizes"] += 1
        out.append(Resize(e.job.id, e.gpu_ids, speed))
