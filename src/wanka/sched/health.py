"""Node health: failures, repairs, draining, and a hot-spare reserve (docs/sched.md "Nodes").

* `fail_nodes`: the nodes go down; every job holding a GPU there stops, loses the work since its
  last checkpoint and waits in the queue with its original place (a gang cannot run without a rank).
* `drain_nodes`: no new work lands there; running jobs stay until they end.
* `repair_nodes`: the nodes come back (a drain is cleared too); an idle repaired node refills the
  spare pool first when it is below its target size.
* Hot spares: `spare_nodes` idle nodes are held out of scheduling, one per first-level group (leaf)
  in turn, so a spare is usually close to a failed node. `take_spare(n)` puts n of them into service
  (those in the same leaf as `near` first) and returns their ids, or None when the pool is short.
"""

from __future__ import annotations

from wanka.errors import SpecError


class NodeHealth:
    def __init__(self, spare_nodes: int):
        if not isinstance(spare_nodes, int) or not 0 <= spare_nodes < self.free.nodes:
            raise SpecError("spare_nodes", f"an integer in [0, {self.free.nodes})", spare_nodes)
        self.down: set[int] = set()
        self.drained: set[int] = set()
        self.spare_target = spare_nodes
        self.spares: list[int] = []
        if spare_nodes:
            groups = self.free.levels[0].nodes_in if self.free.levels else [range(self.free.nodes)]
            columns = [list(g)[::-1] for g in groups]  # the last nodes of each leaf first
            while len(self.spares) < spare_nodes:
                for col in columns:
                    if col and len(self.spares) < spare_nodes:
                        self.spares.append(int(col.pop(0)))
            for n in self.spares:
                self.free.set_ok(n, False)

    def _check_nodes(self, node_ids) -> list[int]:
        out = []
        for n in node_ids:
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < self.free.nodes:
                raise SpecError("node_ids", f"node ids in [0, {self.free.nodes})", n)
            out.append(n)
        return out

    def _slots_on(self, n: int) -> list[int]:
        gpn = self.free.gpn
        return sorted(set(self.free.owner[n * gpn:(n + 1) * gpn].tolist()) - {-1})

    def jobs_on_nodes(self, node_ids) -> list[str]:
        """Ids of the jobs holding GPUs on these nodes, in the order they were submitted."""
        slots = sorted({s for n in self._check_nodes(node_ids) for s in self._slots_on(n)})
        return [self._slots[s].job.id for s in slots]

    def fail_nodes(self, node_ids, now_s: float) -> list[str]:
        hit = []
        for n in self._check_nodes(node_ids):
            self.down.add(n)
            if n in self.spares:
                self.spares.remove(n)
            self.free.set_ok(n, False)
            for slot in self._slots_on(n):
                js = self._slots[slot]
                self._stop(js, now_s)
                self.stats["failed_jobs"] += 1
                hit.append(js.job.id)
        return hit

    def repair_nodes(self, node_ids, now_s: float) -> None:
        for n in self._check_nodes(node_ids):
            self.down.discard(n)
            self.drained.discard(n)
            idle = self.free.node_free[n] == self.free.gpn
            if len(self.spares) < self.spare_target and idle and n not in self.spares:
                self.spares.append(n)
                self.free.set_ok(n, False)
            elif n not in self.spares:
                self.free.set_ok(n, True)
                self._dirty = True

    def drain_nodes(self, node_ids, now_s: float) -> None:
        for n in self._check_nodes(node_ids):
            self.drained.add(n)
            if n in self.spares:
                self.spares.remove(n)
            self.free.set_ok(n, False)

    def take_spare(self, n_nodes: int, near=None) -> list[int] | None:
        if not isinstance(n_nodes, int) or n_nodes < 1:
            raise SpecError("n_nodes", "an integer >= 1", n_nodes)
        if n_nodes > len(self.spares):
            return None
        pool = list(self.spares)
        if near and self.free.levels:
            leaf = self.free.levels[0].of_node
            close = {int(leaf[m]) for m in self._check_nodes(near)}
            pool.sort(key=lambda n: int(leaf[n]) not in close)  # stable: same-leaf spares first
        chosen = pool[:n_nodes]
        for n in chosen:
            self.spares.remove(n)
            self.free.set_ok(n, True)
            self._dirty = True
        self.stats["spares_taken"] += n_nodes
        return chosen
