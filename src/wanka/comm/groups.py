"""Where a communicator's ranks sit on the cluster hierarchy.

A `Group` records, level by level (innermost first, one entry per `cluster.levels`), how many
sub-units the group uses inside one unit of that level:

    fanout[0]      GPUs of the group inside one scale-up domain
    fanout[i]      units of level i-1 the group uses inside one unit of level i   (0 < i < L-1)
    fanout[L-1]    units of level L-2 the group uses in all (the top level spans the cluster)

so product(fanout) == size for a regular placement (a group spread evenly over its units).
Example: dp=128 ranks at stride 8 on wanka-10k (levels scale-up 8, leaf 256, spine 1024, core
10240) -> fanout (1, 32, 4, 1): one GPU per domain, 32 domains per leaf, 4 leaves, one spine block.
Irregular placements are rounded up per level (the busiest unit sets the pace of a collective).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

from wanka.errors import SpecError

if TYPE_CHECKING:
    from wanka.cluster import Cluster


@dataclass(frozen=True)
class Group:
    size: int  # ranks in the communicator
    fanout: tuple[int, ...]  # see the module docstring
    # the two ranks are the two dies of one package (GPU ids 2k, 2k+1): a part's catalog
    # scale_up.pair_GBps applies between them (an MI250X's GCD pair, wanka.comm.collectives)
    pair: bool = False

    def units_used(self) -> tuple[int, ...]:
        """How many units of each level the group touches: n_i = product(fanout[i+1:])."""
        out = []
        for i in range(len(self.fanout)):
            out.append(math.prod(self.fanout[i + 1:]))
        return tuple(out)

    def gpus_per_unit(self) -> tuple[int, ...]:
        """GPUs of the group inside one unit of each level: m_i = product(fanout[:i+1])."""
        return tuple(math.prod(self.fanout[: i + 1]) for i in range(len(self.fanout)))

    @property
    def top_level(self) -> int:
        """Index of the outermost level the group's traffic crosses (0 = stays in one domain)."""
        for i in range(len(self.fanout) - 1, 0, -1):
            if self.fanout[i] > 1:
                return i
        return 0


def _busiest_fanout(ids: np.ndarray, units: list[np.ndarray]) -> tuple[int, ...]:
    """fanout[i]: the most level-(i-1) units (GPUs for i = 0) that one level-i unit holds."""
    below = ids
    fan = []
    for unit in units:
        # distinct (unit, below) pairs as one integer key: np.unique(axis=1) sorts rows, ~20x slower
        radix = int(below.max()) + 1
        pairs = np.unique(unit * radix + below)
        fan.append(int(np.unique(pairs // radix, return_counts=True)[1].max()))
        below = unit
    return tuple(fan)


def _level_unit_ids(cluster: "Cluster", gpu_ids: np.ndarray) -> list[np.ndarray]:
    gpn = cluster.gpus_per_node
    node = gpu_ids // gpn
    groups = cluster.node_groups()
    out = []
    for i, level in enumerate(cluster.levels):
        if i == len(cluster.levels) - 1:
            out.append(np.zeros_like(gpu_ids))  # the top level spans the whole cluster
        elif level.name in groups:
            out.append(np.asarray(groups[level.name])[node])
        else:
            out.append(gpu_ids // level.span_gpus)
    return out


def group_of_gpus(cluster: "Cluster", gpu_ids: Sequence[int]) -> Group:
    """The Group of actually placed GPUs (global id = node * gpus_per_node + local index)."""
    ids = np.asarray(list(gpu_ids), dtype=np.int64)
    if ids.size == 0:
        raise SpecError("gpu_ids", "at least one GPU id")
    if ids.min() < 0 or ids.max() >= cluster.gpus:
        raise SpecError("gpu_ids", f"ids in 0..{cluster.gpus - 1}", int(ids.max() if ids.max() >= cluster.gpus else ids.min()))
    ids = np.unique(ids)
    pair = ids.size == 2 and _package_pair(int(ids[0]), int(ids[1]))
    return Group(int(ids.size), _busiest_fanout(ids, _level_unit_ids(cluster, ids)), pair)


def _package_pair(a: int, b: int) -> bool:
    """GPUs a and b are the two dies of one package: ids 2k and 2k+1 (Group.pair)."""
    return a != b and a // 2 == b // 2


@lru_cache(maxsize=4096)
def _stride_fanout(spans: tuple[int, ...], size: int, stride: int) -> tuple[int, ...]:
    ids = np.arange(size, dtype=np.int64) * stride
    units = [ids // span for span in spans[:-1]] + [np.zeros_like(ids)]
    return _busiest_fanout(ids, units)


def group_for_stride(cluster: "Cluster", size: int, stride: int) -> Group:
    """Ranks r*stride for r in range(size), from GPU 0: how the planner places its groups
    (tp innermost: tp groups have stride 1, cp groups stride tp, dp groups stride tp*cp, ...)."""
    if size < 1 or stride < 1:
        raise SpecError("group", "size >= 1 and stride >= 1", (size, stride))
    if (size - 1) * stride >= cluster.gpus:
        raise SpecError("group", f"(size-1)*stride < GPUs ({cluster.gpus})", (size, stride))
    spans = tuple(level.span_gpus for level in cluster.levels)
    return Group(size, _stride_fanout(spans, size, stride), size == 2 and _package_pair(0, stride))
