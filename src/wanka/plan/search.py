"""Enumerate every valid layout for (model, cluster, global batch, sequence), drop what does not
fit in memory, rank by step time (docs/plan.md "Search").

Degrees searched: tp (powers of two within the scale-up domain that divide heads and suit
kv_heads), cp (powers of two dividing the sequence, up to 32), pp (every divisor of GPUs/(tp*cp)
up to the layer count), vpp (1, 2, 4, 8 where pp*vpp <= layers and the micro-batches allow
interleaving), ep (MoE only: powers of two dividing experts and dp*cp), mbs (1, 2, 4),
zero (1, 3), recompute (none, selective, full). Memory is checked before time (cheap first); once a
layout fits with a lighter recompute, its heavier-recompute twins are dominated (same communication
and memory headroom, strictly more compute) and are not priced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from wanka.cluster import Cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.estimate import Estimate, estimate
from wanka.plan.exposure import Options
from wanka.plan.memory import fits, memory_per_gpu
from wanka.workload.spec import ModelSpec

DEFAULT_BATCH_TOKENS = 16 * 1024 * 1024  # Llama 3 405B's 16M-token batch (arXiv:2407.21783 s.3.4)
MBS = (1, 2, 4)
VPP = (1, 2, 4, 8)
ZERO = (1, 3)
RECOMPUTE = ("none", "selective", "full")


@dataclass
class SearchStats:
    evaluated: int = 0  # valid layouts enumerated and decided (priced, out of memory, or dominated)
    timed: int = 0  # layouts that fit and were priced
    seconds: float = 0.0

    @property
    def layouts_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def default_gbs(model: ModelSpec, cluster: Cluster, seq: int) -> int:
    return max(1, DEFAULT_BATCH_TOKENS // seq)


def _batch(gbs: int | None, target: int, dp: int, mbs: int) -> int | None:
    """The layout's global batch: the given one if dp*mbs divides it; without a given batch, the
    largest multiple of dp*mbs within the default (None when one micro-batch per replica exceeds it:
    a bigger batch would win on efficiency, not on layout)."""
    unit = dp * mbs
    if gbs is not None:
        return gbs if gbs % unit == 0 else None
    return (target // unit) * unit or None


def candidate_layouts(model: ModelSpec, cluster: Cluster, gbs: int | None, seq: int, precision: str = "bf16"):
    n = cluster.gpus
    kv = model.kv_heads_
    tps = [t for t in _pow2_upto(min(cluster.domain, model.heads)) if model.heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    cps = [c for c in _pow2_upto(32) if seq % c == 0 and (c == 1 or seq // c >= 512)]
    for tp in tps:
        for cp in cps:
            if n % (tp * cp):
                continue
            rest = n // (tp * cp)
            for pp in (p for p in range(1, min(rest, model.layers) + 1) if rest % p == 0):
                dp = rest // pp
                eps = [1]
                if model.moe is not None:
                    eps = [e for e in _pow2_upto(model.moe.experts) if model.moe.experts % e == 0 and (dp * cp) % e == 0]
                target = default_gbs(model, cluster, seq)
                for mbs in MBS:
                    batch = _batch(gbs, target, dp, mbs)
                    if batch is None:
                        continue
                    micro = batch // (dp * mbs)
                    for vpp in VPP:
                        if vpp > 1 and (pp == 1 or pp * vpp > model.layers or micro % pp):
                            continue
                        for ep in eps:
                            for zero in ZERO:
                                for rec in RECOMPUTE:
                                    yield Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, mbs=mbs, gbs=batch,
                                                 zero=zero, recompute=rec, precision=precision)


def search(model: ModelSpec, cluster: Cluster, gbs: int | None = None, seq: int | None = None, top: int = 5,
           precision: str = "bf16", options: Options | None = None, stats: SearchStats | None = None) -> list[Estimate]:
    """Best `top` fitting layouts, fastest first (highest tokens/s). Without `gbs`, each layout
    takes the largest multiple of dp*mbs within a 16M-token batch."""
    seq = seq or model.seq_len
    opts = options or Options()
    stats = stats if stats is not None else SearchStats()
    t0 = time.perf_counter()
    found: list[Estimate] = []
    skip_base = None
    for lay in candidate_layouts(model, cluster, gbs, seq, precision):
        stats.evaluated += 1
        base = (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.vpp, lay.mbs, lay.zero)
        if base == skip_base:
            continue  # a lighter recompute of this layout already fits: more recompute is only slower
        if not fits(memory_per_gpu(model, lay, seq, opts.attention), cluster.gpu.hbm_GB):
            continue
        skip_base = base
        stats.timed += 1
        found.append(estimate(model, cluster, lay, seq_len=seq, options=opts))
    stats.seconds = time.perf_counter() - t0
    if not found:
        if stats.evaluated == 0:
            raise SpecError("gbs", f"a multiple of dp*mbs for some layout of {model.name} on {cluster.gpus} GPUs", gbs)
        raise SpecError("gbs", f"a batch and cluster on which some layout of {model.name} fits in "
                        f"{cluster.gpu.hbm_GB} GB per GPU (none of {stats.evaluated} layouts does)", gbs)
    found.sort(key=lambda e: -e.tokens_per_s)  # = step time when the batch is fixed
    return found[:top]
