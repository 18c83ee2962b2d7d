"""Fail-slow (straggler) detection against injected truth: per-node step times, a detector, and its
precision, recall and latency.

Truth (one job, `nodes` nodes, one measurement per node per `window_s` window: the time its ranks
compute before the step's collective, relative to the job's nominal step):
  * job-intrinsic imbalance, fixed per node for the whole job (pipeline-stage partition and
    sequence-length imbalance; within a job the slowdown is steady, p90 of the normalised step
    1.06: Lin et al., OSDI'25 section 4-5 [Q]). Drawn as 1 + |N(0, 0.04)| (p90 ~1.066) [D];
  * ambient drift common to every node: diurnal +-1.5% (Llama 3 section 3.3.4: 1-2% [P]);
  * noise per window: N(0, noise) with noise 1% [G];
  * hardware fail-slow episodes: onsets per node-day, each slowing its node `slowdown` x (MegaScale:
    ~10% slower hosts [P]), lasting log-uniformly 1 min to 10 h (Falcon: fail-slows last "sub-
    minutes to nearly ten hours" [A]).
Detector (ByteRobust section 5.1 aggregates every 10 s and acts on the group with the most outliers
over 5 rounds [P]): each window, a node's ratio to the cross-node median (this removes the common
drift), divided by its own median ratio over a warm-up (this removes the job-intrinsic imbalance,
which is steady); the node is flagged when that exceeds 1 + `threshold` for `rounds` consecutive
windows. A node stays flagged until it is evicted (`evict`) or its ratio falls back.

Scoring: an episode is detected when its node is flagged while it lasts; latency = flag - onset.
A flag outside every episode is a false positive. precision = true flags / flags; recall = detected
/ episodes (also for episodes longer than `rounds` windows, the ones this design can see).
Mitigation: with eviction after `evict_s`, the share of the episodes' slow node-seconds removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wanka.errors import SpecError


@dataclass(frozen=True)
class FailSlowTruth:
    nodes: int = 512
    hours: float = 12.0
    window_s: float = 10.0  # ByteRobust aggregation period [P]
    onsets_per_node_day: float = 0.2  # accelerated for statistics [G]; MegaScale: ~0.5% of machines slow [P]
    slowdown: float = 1.10  # MegaScale ~10% [P]
    min_episode_s: float = 60.0  # Falcon: sub-minutes ... [A]
    max_episode_s: float = 36000.0  # ... to nearly ten hours [A]
    intrinsic_sigma: float = 0.04  # [D] from Lin et al.'s p90 1.06 [Q]
    diurnal: float = 0.015  # Llama 3: 1-2% [P]
    noise: float = 0.01  # [G]

    def __post_init__(self):
        for name in ("nodes", "hours", "window_s", "slowdown"):
            if not getattr(self, name) > 0:
                raise SpecError(name, "a number > 0", getattr(self, name))
        if self.slowdown < 1.0:
            raise SpecError("slowdown", "a factor >= 1", self.slowdown)


@dataclass(frozen=True)
class Detector:
    threshold: float = 0.05  # flag above 1.05 x the node's own normal
    rounds: int = 5  # ByteRobust: 5 rounds [P]
    warmup_windows: int = 60  # 10 min of 10 s windows to learn each node's intrinsic ratio [G]
    evict_s: float = 60.0  # a hot-spare swap after the flag (ByteRobust hot update 46-65 s [P])
    per_node_baseline: bool = True  # False: a naive detector that takes job-intrinsic imbalance for fail-slow


def inject(truth: FailSlowTruth, rng: np.random.Generator):
    """Step-time ratios (nodes, windows) and the episodes (node, start window, end window)."""
    w = int(truth.hours * 3600 / truth.window_s)
    t = np.arange(w) * truth.window_s
    intrinsic = 1.0 + np.abs(rng.normal(0.0, truth.intrinsic_sigma, truth.nodes))
    drift = 1.0 + truth.diurnal * np.sin(2 * math.pi * t / 86400.0 + rng.random() * 2 * math.pi)
    x = intrinsic[:, None] * drift[None, :] * (1.0 + rng.normal(0.0, truth.noise, (truth.nodes, w)))
    k = rng.poisson(truth.onsets_per_node_day * truth.nodes * truth.hours / 24.0)
    node = rng.integers(0, truth.nodes, k)
    start = rng.integers(0, w, k)
    dur_s = np.exp(rng.uniform(math.log(truth.min_episode_s), math.log(truth.max_episode_s), k))
    end = np.minimum(w, start + np.ceil(dur_s / truth.window_s).astype(int))
    for n, a, b in zip(node, start, end):
        x[n, a:b] *= truth.slowdown
    return x, np.stack([node, start, end], axis=1) if k else np.zeros((0, 3), int)


def detect(x: np.ndarray, det: Detector) -> np.ndarray:
    """Flag onsets (node, window) from step-time ratios (nodes, windows)."""
    rel = x / np.median(x, axis=0, keepdims=True)  # the common drift cancels
    base = np.median(rel[:, :det.warmup_windows], axis=1, keepdims=True) if det.per_node_baseline else 1.0
    high = rel / base > 1.0 + det.threshold
    run = np.zeros(x.shape[0], dtype=int)  # consecutive high windows per node
    at_rounds = np.zeros_like(high)
    for i in range(det.warmup_windows, x.shape[1]):
        run = np.where(high[:, i], run + 1, 0)
        at_rounds[:, i] = run == det.rounds  # one flag per excursion
    return np.argwhere(at_rounds)


def score(flags: np.ndarray, episodes: np.ndarray, det: Detector, truth: FailSlowTruth) -> dict:
    by_node: dict[int, list] = {}
    for e, (n, a, b) in enumerate(episodes):
        by_node.setdefault(int(n), []).append((int(a), int(b), e))
    first = {}
    true_flags = 0
    for n, i in flags:
        hit = [e for a, b, e in by_node.get(int(n), []) if a <= i < b]
        if hit:
            true_flags += 1
            for e in hit:
                first.setdefault(e, i)
    visible = [e for e, (n, a, b) in enumerate(episodes) if a >= det.warmup_windows and b - a > det.rounds]
    lat = [(first[e] - episodes[e][1] + 1) * truth.window_s for e in first]  # flag at the end of its window
    slow = removed = 0.0
    for e, (n, a, b) in enumerate(episodes):
        slow += (b - a) * truth.window_s
        if e in first:  # evicted evict_s after the flag: the rest of the episode no longer slows the job
            removed += max(0.0, (b - first[e] - 1) * truth.window_s - det.evict_s)
    return {
        "episodes": len(episodes), "flags": len(flags),
        "precision": true_flags / len(flags) if len(flags) else None,
        "recall": len(first) / len(episodes) if len(episodes) else None,
        "recall_visible": (sum(e in first for e in visible) / len(visible)) if visible else None,
        "latency_s_median": float(np.median(lat)) if lat else None,
        "recovered_share": float(removed / slow) if slow else None,
    }


def study(truth: FailSlowTruth = FailSlowTruth(), det: Detector = Detector(), seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    x, episodes = inject(truth, rng)
    return score(detect(x, det), episodes, det, truth)
