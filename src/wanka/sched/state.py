"""Free-GPU bookkeeping for placement: numpy counters per node and per topology group.

Levels above the node come from `Cluster.node_groups()` (scale-up domain, leaf, spine, core, ...);
a level whose groups are single nodes (an 8-GPU NVLink domain on 8-GPU nodes) is dropped, and the
rest must nest (each group lies inside one group of the next level), as in a fat-tree. A node is
*schedulable* when it is up, not drained and not held as a hot spare; `avail` counts free GPUs on
schedulable nodes only, so placement never looks at the others.
"""

from __future__ import annotations

import numpy as np

from wanka.errors import SpecError


class GroupLevel:
    """One topology level above the node: group id per node, capacity and available GPUs per group."""

    def __init__(self, name: str, of_node: np.ndarray, gpus_per_node: int):
        _, self.of_node = np.unique(of_node, return_inverse=True)
        self.name = name
        self.count = int(self.of_node.max()) + 1
        self.nodes_in = [np.flatnonzero(self.of_node == g) for g in range(self.count)]
        self.capacity = np.bincount(self.of_node, minlength=self.count) * gpus_per_node
        self.avail = np.zeros(self.count, dtype=np.int64)
        self.children: list[np.ndarray] = []  # filled by FreeGPUs: child-level group ids per group


class FreeGPUs:
    def __init__(self, cluster):
        self.gpn = cluster.gpus_per_node
        self.nodes = cluster.nodes
        self.owner = np.full(self.nodes * self.gpn, -1, dtype=np.int64)  # job slot per GPU, -1 free
        self.node_free = np.full(self.nodes, self.gpn, dtype=np.int64)
        self.node_ok = np.ones(self.nodes, dtype=bool)
        self.avail = self.node_free.copy()  # free GPUs on schedulable nodes
        self.levels: list[GroupLevel] = []
        self.alias: dict[str, int] = {}  # level name -> index in levels; -1 = one node holds it
        for name, ids in cluster.node_groups().items():
            lvl = GroupLevel(name, np.asarray(ids), self.gpn)
            if lvl.count == self.nodes or (self.levels and lvl.count == self.levels[-1].count):
                self.alias[name] = len(self.levels) - 1  # single nodes, or a repeat of the level below
                continue
            self.alias[name] = len(self.levels)
            self.levels.append(lvl)
        if not self.levels or self.levels[-1].count != 1:  # a top level holding everything
            self.levels.append(GroupLevel("cluster", np.zeros(self.nodes, dtype=np.int64), self.gpn))
        for lower, upper in zip([None] + self.levels[:-1], self.levels):
            child_of_node = np.arange(self.nodes) if lower is None else lower.of_node
            for g in range(upper.count):
                kids = np.unique(child_of_node[upper.nodes_in[g]])
                upper.children.append(kids)
            if lower is not None:  # nesting: a child group must sit in exactly one parent
                pairs = np.unique(np.stack([lower.of_node, upper.of_node]), axis=1)
                if pairs.shape[1] != lower.count:
                    raise SpecError("cluster topology", f"{lower.name} groups nested inside {upper.name} groups")
        for lvl in self.levels:
            lvl.avail = np.bincount(lvl.of_node, weights=self.avail, minlength=lvl.count).astype(np.int64)
        self.total_avail = int(self.avail.sum())

    # ---- changes -----------------------------------------------------------------------------
    def _bump(self, node: int, delta: int) -> None:
        self.avail[node] += delta
        self.total_avail += delta
        for lvl in self.levels:
            lvl.avail[lvl.of_node[node]] += delta

    def take(self, node: int, k: int, slot: int) -> list[int]:
        """Give k free GPUs of a node to job `slot`; returns their global ids."""
        base = node * self.gpn
        free = np.flatnonzero(self.owner[base:base + self.gpn] < 0)[:k]
        assert len(free) == k, "placement asked for more GPUs than the node has free"
        ids = (free + base).tolist()
        self.owner[ids] = slot
        self.node_free[node] -= k
        if self.node_ok[node]:
            self._bump(node, -k)
        return ids

    def give_back(self, gpu_ids) -> None:
        ids = list(gpu_ids)
        self.owner[ids] = -1
        per_node: dict[int, int] = {}
        for i in ids:
            node = i // self.gpn
            per_node[node] = per_node.get(node, 0) + 1
        for node, k in per_node.items():
            self.node_free[node] += k
            if self.node_ok[node]:
                self._bump(node, k)

    def set_ok(self, node: int, ok: bool) -> None:
        if self.node_ok[node] == ok:
            return
        self.node_ok[node] = ok
        self._bump(node, int(self.node_free[node]) if ok else -int(self.node_free[node]))

    # ---- queries -----------------------------------------------------------------------------
    def level(self, topology: str) -> int:
        """Index of the level a topology request names: -1 = one node, len(levels)-1 = anywhere."""
        if topology == "best-effort":
            return len(self.levels) - 1
        return self.alias.get(topology, len(self.levels) - 1)

    def take_ids(self, gpu_ids, slot: int) -> None:
        """Give exactly these (free) GPUs to job `slot` (used to undo a tentative release)."""
        ids = list(gpu_ids)
        assert (self.owner[ids] < 0).all(), "take_ids on GPUs that are not free"
        self.owner[ids] = slot
        per_node: dict[int, int] = {}
        for i in ids:
            per_node[i // self.gpn] = per_node.get(i // self.gpn, 0) + 1
        for node, k in per_node.items():
            self.node_free[node] -= k
            if self.node_ok[node]:
                self._bump(node, -k)
