"""Expert placement load balancing in the manner of DeepSeek's EPLB (deepseek-ai/EPLB eplb.py,
"global" policy; described in the project's reference notes, re-implemented here):

1. replicate: give the `redundant` extra slots one at a time to the logical expert with the highest
   load per replica (minimises the max per-replica load);
2. balanced packing: sort the physical replicas by load (descending) and put each into the least
   loaded EP rank that still has room (every rank gets exactly slots/ep replicas). The runtime
   holds an expert at most once per rank, so a rank that already holds that expert is skipped.

The result is one Placement per MoE layer. The trainer applies it at checkpoint boundaries.
"""

from __future__ import annotations

import torch

from wanka.errors import SpecError
from wanka.train.experts import Placement


def replica_counts(load: torch.Tensor, slots: int, ep: int) -> list[int]:
    """Replicas per logical expert: one each, then each extra slot to the max load/replicas among the
    experts that still have fewer than `ep` replicas (the runtime holds an expert at most once per rank,
    so an expert can have at most one replica per EP rank)."""
    experts = load.shape[0]
    counts = [1] * experts
    for _ in range(slots - experts):
        open_ = [e for e in range(experts) if counts[e] < ep]  # non-empty: check_redundant bounds the slots
        counts[max(open_, key=lambda e: (float(load[e]) / counts[e], -e))] += 1
    return counts


def check_redundant(experts: int, ep: int, redundant: int) -> None:
    if (experts + redundant) % ep:
        raise SpecError("moe-redundant-experts", f"a count making experts ({experts}) + redundant divisible by ep ({ep})",
                        redundant)
    if redundant > experts * (ep - 1):
        raise SpecError("moe-redundant-experts", f"at most experts*(ep-1) = {experts * (ep - 1)}", redundant)


def balanced_placement(load: torch.Tensor, ep: int, redundant: int = 0) -> Placement:
    """Placement of one layer's experts (load[e] = tokens routed to e) over `ep` ranks."""
    experts = load.shape[0]
    check_redundant(experts, ep, redundant)
    slots = experts + redundant
    counts = replica_counts(load, slots, ep)
    items = [(float(load[e]) / counts[e], e) for e in range(experts) for _ in range(counts[e])]
    items.sort(key=lambda it: (-it[0], it[1]))
    per_rank = slots // ep
    ranks: list[list[int]] = [[] for _ in range(ep)]
    weight = [0.0] * ep
    load_of = {e: w for w, e in items}  # per-replica load of each expert
    for w, e in items:
        open_ = [r for r in range(ep) if len(ranks[r]) < per_rank and e not in ranks[r]]
        if not open_:  # every rank with room already holds e: make room by one swap
            open_ = [_swap_for(ranks, weight, load_of, e, per_rank)]
        r = min(open_, key=lambda r: (weight[r], r))
        ranks[r].append(e)
        weight[r] += w
    return Placement.from_lists(sorted(held) for held in ranks)


def _swap_for(ranks: list[list[int]], weight: list[float], load_of: dict[int, float], e: int, per_rank: int) -> int:
    """Free a slot for expert `e` when every rank with room already holds it: some full rank q lacks e (e
    has fewer placed replicas than ranks, as replica_counts caps them at ep), and, being fuller than a rank
    r with room, q holds an expert f that r lacks; f moves to r and q takes e. Returns q."""
    r = next(i for i, held in enumerate(ranks) if len(held) < per_rank)
    q = min((i for i, held in enumerate(ranks) if e not in held), key=lambda i: (weight[i], i))
    f = max((x for x in ranks[q] if x not in ranks[r]), key=lambda x: (-load_of[x], x))  # the lightest movable
    ranks[q].remove(f)
    ranks[r].append(f)
    weight[q] -= load_of[f]
    weight[r] += load_of[f]
    return q


def rebalance(load: torch.Tensor, ep: int, redundant: int = 0) -> list[Placement]:
    """One placement per layer from a [layers, experts] load matrix."""
    return [balanced_placement(row, ep, redundant) for row in load]
