"""Where a gang lands: first-fit and topology-aware best-fit (docs/sched.md "Placement").

Both return a list of (node, gpus) pairs or None. `cap` is the highest level the whole gang must sit
in (-1: one node; the job's topology request), see `FreeGPUs.level`.

* first-fit: the lowest-numbered free GPUs (nodes in index order), the naive baseline that ignores
  the network.
* topo-bestfit: Slurm topology/tree ("identify the lowest level switch in the hierarchy that can
  satisfy a job's request and then allocate resources on its underlying leaf switches using a
  best-fit algorithm", SchedMD doc/html/topology.shtml) with Kueue TAS BestFit inside it ("selects
  as many domains as needed starting from the one with the most free capacity ... optimizes the
  selection of the last domain at each level to minimize the remaining free resources", KEP-2724).
  A gang that fits one node takes the best-fit node (fewest free GPUs that hold it).
"""

from __future__ import annotations

import math

import numpy as np

from wanka.sched.state import FreeGPUs

Alloc = list[tuple[int, int]]
_BIG = np.iinfo(np.int64).max


def first_fit(free: FreeGPUs, g: int, cap: int) -> Alloc | None:
    if g > free.total_avail:
        return None
    if cap < 0:
        hits = np.flatnonzero(free.avail >= g)
        return [(int(hits[0]), g)] if len(hits) else None
    top = len(free.levels) - 1
    if cap >= top:
        nodes = np.arange(free.nodes)
    else:
        lvl = free.levels[cap]
        hits = np.flatnonzero(lvl.avail >= g)
        if not len(hits):
            return None
        nodes = lvl.nodes_in[int(hits[0])]
    return _take_in_order(free.avail[nodes], nodes, g)


def _take_in_order(avail: np.ndarray, nodes: np.ndarray, g: int) -> Alloc | None:
    cum = np.cumsum(avail)
    last = int(np.searchsorted(cum, g))
    if last >= len(nodes):
        return None
    out = [(int(n), int(a)) for n, a in zip(nodes[:last], avail[:last]) if a > 0]
    out.append((int(nodes[last]), g - (int(cum[last - 1]) if last else 0)))
    return out


def topo_bestfit(free: FreeGPUs, g: int, cap: int) -> Alloc | None:
    if g > free.total_avail:
        return None
    if g <= free.gpn:
        node = _best_node(free, g)
        if node is not None:
            return [(node, g)]
    for li in range(0, min(cap, len(free.levels) - 1) + 1):
        lvl = free.levels[li]
        fits = lvl.avail >= g
        if fits.any():
            group = _best_group(free, li, np.flatnonzero(fits), g)
            out: Alloc = []
            _fill(free, li, group, g, out)
            return out
    return None


def _best_group(free: FreeGPUs, li: int, cands: np.ndarray, g: int) -> int:
    """Best-fit group at level li: the fewest free GPUs that hold g. Above the leaf level (few groups)
    the fewest children needed comes first, so an irregular tree (Lingjun's leaves of 2-8 nodes)
    does not trade leaves for a tighter spine block."""
    lvl = free.levels[li]
    if li == 0 or len(cands) == 1:
        return int(cands[np.argmin(lvl.avail[cands])])
    below = free.levels[li - 1].avail
    best = None
    for c in cands.tolist():
        kids = np.sort(below[lvl.children[c]])[::-1]
        needed = int(np.searchsorted(np.cumsum(kids), g)) + 1
        key = (needed, int(lvl.avail[c]), c)
        best = key if best is None or key < best else best
    return best[2]


def _best_node(free: FreeGPUs, g: int) -> int | None:
    """The node with the fewest free GPUs that still holds g; ties go to the fullest first-level group."""
    avail = free.avail
    fits = avail >= g
    if not fits.any():
        return None
    if free.levels:
        lvl = free.levels[0]
        key = avail * (free.nodes * free.gpn + 1) + lvl.avail[lvl.of_node]
    else:
        key = avail
    return int(np.argmin(np.where(fits, key, _BIG)))


def _fill(free: FreeGPUs, li: int, group: int, need: int, out: Alloc) -> None:
    """Kueue BestFit inside one group: most-free children first, best-fit for the last one."""
    kids = free.levels[li].children[group]
    kid_avail = free.avail[kids] if li == 0 else free.levels[li - 1].avail[kids]
    order = np.argsort(-kid_avail, kind="stable")
    kids, kid_avail = kids[order], kid_avail[order]
    for i in range(len(kids)):
        a = int(kid_avail[i])
        if a == 0:
            break
        if a >= need:  # the last child: the smallest one (from here on) that still holds the rest
            rest = kid_avail[i:]
            j = i + int(np.argmin(np.where(rest >= need, rest, _BIG)))
            _descend(free, li, int(kids[j]), need, out)
            return
        _descend(free, li, int(kids[i]), a, out)
        need -= a
    raise AssertionError("group avail counters disagree with their children")


def _descend(free: FreeGPUs, li: int, kid: int, k: int, out: Alloc) -> None:
    if li == 0:
        out.append((kid, k))
    else:
        _fill(free, li - 1, kid, k, out)


PLACEMENTS = {"first-fit": first_fit, "topo-bestfit": topo_bestfit}


# ---- spread --------------------------------------------------------------------------------------
def spread(free: FreeGPUs, nodes: list[int]) -> tuple[int, ...]:
    """Distinct nodes, then distinct groups at each level, that a placement touches."""
    arr = np.asarray(nodes)
    return (len(set(nodes)),) + tuple(len(set(lvl.of_node[arr].tolist())) for lvl in free.levels)


def minimal_spread(free: FreeGPUs, g: int) -> tuple[int, ...]:
    """Fewest nodes and groups per level any placement of g GPUs needs on the whole (empty) cluster."""
    out = [math.ceil(g / free.gpn)]
    for lvl in free.levels:
        cum = np.cumsum(np.sort(lvl.capacity)[::-1])
        out.append(int(np.searchsorted(cum, g)) + 1)
    return tuple(out)


def shape(free: FreeGPUs, nodes: dict[int, int]) -> tuple:
    """A canonical form of a placement's tree (GPUs per node, nodes per group, ... up to the top):
    two placements with the same shape cost the same in any per-level collective model."""
    units = {n: (n, k) for n, k in nodes.items()}  # unit id -> (a node in it, canonical form)
    for lvl in free.levels:
        up: dict[int, tuple[int, list]] = {}
        for rep, form in units.values():
            parent = int(lvl.of_node[rep])
            up.setdefault(parent, (rep, []))[1].append(form)
        units = {p: (rep, tuple(sorted(forms))) for p, (rep, forms) in up.items()}
    return next(iter(units.values()))[1]
