"""Enumerate every valid layout for (model, cluster, global batch, sequence), drop what does not
fit in memory, rank by step time (docs/plan.md "Search").

Degrees searched: tp (powers of two within the scale-up domain that divide heads and suit
kv_heads), cp (powers of two dividing the sequence, up to 32, >= 512 tokens per rank), pp (every
divisor of GPUs/(tp*cp) up to the layer count), vpp (1, 2, 4, 8 where pp*vpp <= layers + 2 and the
micro-batches allow interleaving; embedding and loss may count as layers, Layout.check_model),
ep (MoE only: powers of two dividing experts and dp*cp), etp (MoE with tp > 1: omitted, i.e. the
experts split over tp, or 1, whole experts, with ep dividing tp*cp*dp), mbs (1, 2, 4), zero (1, 2, 3), recompute
(none, selective, full). Memory is checked before time (cheap first). Dominated layouts are not
priced: a heavier recompute of a layout that fits with a lighter one (same communication, more
compute), and the ZeRO-2 twin of a layout that fits with ZeRO-1 at the same recompute (never
faster: the same per-step reduce-scatter with pipeline stages, one per micro-batch without).

Global batch: a given --gbs is used for every layout (layouts whose dp*mbs does not divide it are
dropped). Without one, ONE batch is chosen for all candidates so that they are compared on equal
terms: the largest batch between half and all of the default 16M tokens that at least 80% as many
(tp, cp, pp, mbs) combinations split evenly as the best-split batch of that range (power-of-two
GPU counts: exactly 16M tokens; 10,240 GPUs: 1,920 x 8K = 15.7M tokens). Only when no layout fits with it does each layout take its own batch (the largest
multiple of dp*mbs within 16M tokens), and the result says so.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from wanka.cluster import Cluster
from wanka.errors import SpecError
from wanka.resolved_layout import ResolvedLayout
from wanka.plan.a2a_overlap import overlap_refusal
from wanka.plan.estimate import Estimate, estimate
from wanka.plan.exposure import Options
from wanka.plan.memory import fits, memory_per_gpu
from wanka.workload.spec import ModelSpec

DEFAULT_BATCH_TOKENS = 16 * 1024 * 1024  # Llama 3 405B's 16M-token batch (arXiv:2407.21783 s.3.4)
MBS = (1, 2, 4)
VPP = (1, 2, 4, 8)
ZERO = (1, 2, 3)
RECOMPUTE = ("none", "selective", "full")
MIN_TOKENS_PER_CP_RANK = 512
COVER_FRACTION = 0.8  # judgement: trade a few layouts for a batch nearer the default


@dataclass
class SearchStats:
    evaluated: int = 0  # valid layouts enumerated and decided (priced, out of memory, or dominated)
    timed: int = 0  # layouts that fit and were priced
    seconds: float = 0.0
    gbs: int | None = None  # the global batch (sequences) every candidate uses; None: per layout
    gbs_rule: str = ""  # how it was chosen
    dropped: Counter = field(default_factory=Counter)  # layouts not priced, by reason

    @property
    def layouts_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"layouts_evaluated": self.evaluated, "layouts_fitting": self.timed, "seconds": self.seconds,
                "layouts_per_s": self.layouts_per_s, "gbs": self.gbs, "gbs_rule": self.gbs_rule,
                "dropped": dict(sorted(self.dropped.items()))}


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def default_gbs(model: ModelSpec, cluster: Cluster, seq: int) -> int:
    return max(1, DEFAULT_BATCH_TOKENS // seq)


def _degrees(model: ModelSpec, cluster: Cluster, seq: int):
    """(tp, cp, pp, dp) combinations; tp and cp lists as in the module docstring."""
    n = cluster.gpus
    kv = model.kv_heads_
    tps = [t for t in _pow2_upto(min(cluster.domain, model.heads)) if model.heads % t == 0 and (kv % t == 0 or t % kv == 0)]
    cps = [c for c in _pow2_upto(32) if seq % c == 0 and (c == 1 or seq // c >= MIN_TOKENS_PER_CP_RANK)]
    for tp in tps:
        for cp in cps:
            if n % (tp * cp):
                continue
            rest = n // (tp * cp)
            for pp in (p for p in range(1, min(rest, model.layers) + 1) if rest % p == 0):
                yield tp, cp, pp, rest // pp


def common_gbs(model: ModelSpec, cluster: Cluster, seq: int) -> int | None:
    """The largest batch (sequences) within [target/2, target] of the default token batch that at
    least COVER_FRACTION as many (tp, cp, pp, mbs) combinations split evenly as the best-split one."""
    target = default_gbs(model, cluster, seq)
    units = Counter(dp * mbs for _, _, _, dp in _degrees(model, cluster, seq) for mbs in MBS)
    cover = {g: sum(k for u, k in units.items() if g % u == 0) for g in range(max(1, target // 2), target + 1)}
    most = max(cover.values(), default=0)
    if most == 0:
        return None
    return max(g for g, k in cover.items() if k >= COVER_FRACTION * most)


def candidate_layouts(model: ModelSpec, cluster: Cluster, gbs: int | None, seq: int, precision: str = "bf16",
                      dropped: Counter | None = None):
    """Every valid layout at global batch `gbs` (None: each layout its own, the largest multiple
    of dp*mbs within the default batch). Skipped branches are counted in `dropped` by reason."""
    dropped = dropped if dropped is not None else Counter()
    target = default_gbs(model, cluster, seq)
    inner = len(ZERO) * len(RECOMPUTE)
    for tp, cp, pp, dp in _degrees(model, cluster, seq):
        # (ep, etp): experts split like the dense layers (etp omitted = tp, ep inside dp*cp), and, with
        # TP, whole experts (etp 1) whose EP group may span the TP ranks (ep dividing tp*cp*dp)
        eps: list[tuple[int, int | None]] = [(1, None)]
        if model.moe is not None:
            split = [e for e in _pow2_upto(model.moe.experts) if model.moe.experts % e == 0]
            eps = [(e, None) for e in split if (dp * cp) % e == 0]
            if tp > 1:
                eps += [(e, 1) for e in split if e > 1 and (tp * cp * dp) % e == 0]
        for mbs in MBS:
            unit = dp * mbs
            batch = (gbs if gbs % unit == 0 else None) if gbs is not None else ((target // unit) * unit or None)
            if batch is None:
                dropped["batch_not_divisible_by_dp_x_mbs"] += len(eps) * inner
                continue
            micro = batch // unit
            for vpp in VPP:
                if vpp > 1 and (pp == 1 or pp * vpp > model.layers + 2):
                    continue  # not a layout (no interleaving without stages / chunks beyond layers)
                if vpp > 1 and micro % pp:
                    dropped["interleaving_needs_microbatches_multiple_of_pp"] += len(eps) * inner
                    continue
                for ep, etp in eps:
                    for zero in ZERO:
                        for rec in RECOMPUTE:
                            # resolved here (dp and gbs are set): memory and pricing do not check it again
                            yield ResolvedLayout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp, mbs=mbs,
                                                 gbs=batch, zero=zero, recompute=rec, precision=precision)


def search(model: ModelSpec, cluster: Cluster, gbs: int | None = None, seq: int | None = None, top: int = 5,
           precision: str = "bf16", options: Options | None = None, stats: SearchStats | None = None) -> list[Estimate]:
    """Best `top` fitting layouts, fastest first (highest tokens/s). Without `gbs`, one common
    batch for every layout when one fits (stats.gbs, stats.gbs_rule say which)."""
    seq = seq or model.seq_len
    opts = options or Options()
    stats = stats if stats is not None else SearchStats()
    t0 = time.perf_counter()
    if gbs is not None:
        stats.gbs, stats.gbs_rule = gbs, "given"
        found = _run(model, cluster, gbs, seq, precision, opts, stats)
    else:
        common = common_gbs(model, cluster, seq)
        stats.gbs = common
        stats.gbs_rule = (f"default: one batch for all candidates, {common} x {seq} tokens (the largest batch within "
                          f"{DEFAULT_BATCH_TOKENS // 2**20}M tokens that nearly the most layouts split evenly)")
        found = _run(model, cluster, common, seq, precision, opts, stats) if common else []
        if not found:
            stats.gbs, stats.gbs_rule = None, (f"per layout: the largest multiple of dp*mbs within "
                                               f"{DEFAULT_BATCH_TOKENS // 2**20}M tokens (no layout fits one common batch)")
            stats.dropped.clear()
            stats.evaluated = stats.timed = 0
            found = _run(model, cluster, None, seq, precision, opts, stats)
    stats.seconds = time.perf_counter() - t0
    if not found:
        if stats.evaluated == 0 and gbs is not None:
            raise SpecError("gbs", f"a multiple of dp*mbs for some layout of {model.name} on {cluster.gpus} GPUs", gbs)
        if stats.evaluated == 0:  # no batch given: the default (16M tokens / seq) is what fails, e.g. a huge seq
            raise SpecError("seq", f"a sequence length whose default batch ({default_gbs(model, cluster, seq)} x "
                            f"{seq} tokens) some layout of {model.name} on {cluster.gpus} GPUs can split; or pass gbs",
                            seq)
        raise SpecError("gpus", f"a cluster on which some layout of {model.name} fits in "
                        f"{cluster.gpu.hbm_GB} GB per GPU (none of {stats.evaluated} layouts does at "
                        f"{'gbs ' + str(gbs) if gbs else 'the default batch'}): more GPUs or a smaller model",
                        cluster.gpus)
    found.sort(key=lambda e: -e.tokens_per_s)  # = step time when the batch is fixed
    return found[:top]


def _run(model, cluster, gbs, seq, precision, opts, stats) -> list[Estimate]:
    found: list[Estimate] = []
    fit_rec: dict[tuple, int] = {}  # (layout less zero and recompute, zero) -> lightest recompute that fits
    hbm = cluster.gpu.hbm_GB
    dualpipe = opts.pipeline == "dualpipe"
    for lay in candidate_layouts(model, cluster, gbs, seq, precision, stats.dropped):
        if dualpipe and (lay.pp < 2 or lay.pp % 2 or lay.vpp > 1):
            stats.dropped["dualpipe_needs_even_pp_and_vpp_1"] += 1
            continue
        if opts.moe_a2a_overlap and (refused := overlap_refusal(lay)):  # layouts Megatron-Core refuses it on
            stats.dropped[refused[0]] += 1
            continue
        stats.evaluated += 1
        base = (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.etp, lay.vpp, lay.mbs, lay.gbs)
        rec = RECOMPUTE.index(lay.recompute)
        if fit_rec.get((base, lay.zero), 99) < rec:
            stats.dropped["dominated_by_lighter_recompute"] += 1
            continue
        if lay.zero == 2 and fit_rec.get((base, 1), 99) <= rec:
            stats.dropped["dominated_by_zero1"] += 1
            continue
        if not fits(memory_per_gpu(model, lay, seq, opts.attention, opts.recompute_modules,
                                   opts.fp8_activation_cache, dualpipe, opts.fp8_params), hbm):
            stats.dropped["out_of_memory"] += 1
            continue
        fit_rec[(base, lay.zero)] = rec
        stats.timed += 1
        found.append(estimate(model, cluster, lay, seq_len=seq, options=opts))
    return found
