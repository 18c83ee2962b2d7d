"""Prediction intervals from the planner's own validation residuals (docs/plan.md "Uncertainty").

Every prediction belongs to a *class* (mechanism_class): its framework profile and mechanism (MoE,
ZeRO-3 by gather unit, pre-FlashAttention Megatron/DeepSpeed, dense), e.g. "torchtitan/dense". The residual of a published run is
r = ln(predicted / measured) of its compared quantity (tokens/s per GPU, else MFU or HFU; run-level
averages are left out). For a new prediction v in class c, the measured value is v * exp(-r) with
r drawn from the class's residuals, so

    tokens/s:  p10 = v * exp(-q90(r)),  p90 = v * exp(-q10(r))
    step time: p10 = v * exp(q10(r)),   p90 = v * exp(q90(r))

with q the split-conformal order statistics of the class's residuals (conformal_ranks). The
interval is not centred on v when the class is biased (MoE rows run slower than predicted): that
is the point of it.

The residuals are a data file in the package (residuals.json), written from the built-in
validate sets by one command after any change to a mechanism:

    wanka plan validate --write-residuals

Coverage (`wanka plan validate` reports it) must not be fitted to itself: a row of a built-in set
is judged against residuals with its own configuration left out (leave-one-out, where the repeats
of one configuration under several framework versions leave together).
With fewer than MIN_ROWS residuals a class borrows its parent's band (the profile's rows, then the
mechanism's across profiles, then all rows: parents), stretched over its own residuals.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from wanka.plan.efficiency import transferred

TABLE = Path(__file__).parent / "residuals.json"
MIN_ROWS = 9  # the smallest n whose conformal p10/p90 ranks (conformal_ranks) both exist
LOW, HIGH = 0.10, 0.90


def base_class(model, lay, opts) -> str:
    """The mechanism part of a class: MoE, ZeRO-3 by gather unit, pre-FlashAttention, dense."""
    if model.moe is not None:
        return "moe"
    if lay.zero == 3:
        return f"zero3-{opts.zero3_unit}"
    if opts.attention == "unfused":
        return "dense-pre-flash"
    return "dense"


TRANSFERRED = "@transferred-gemm"  # suffix of a class whose GPU's GEMM constant is transferred, not anchored


def mechanism_class(model, lay, opts, gpu=None) -> str:
    """The class whose residuals price this prediction's uncertainty: the framework profile the
    Options came from (plan/frameworks.py; a framework's unmodelled costs are shared by its runs)
    and the mechanism, e.g. "torchtitan/zero3-layer"; just the mechanism without a profile. On a
    part whose GEMM constant is carried over from another part's ratio (efficiency.transfer_efficiency:
    Gaudi, AMD Instinct) the class ends in TRANSFERRED: the anchored NVIDIA rows' residuals do not
    hold that assumption's error, so such predictions are judged first by each other's residuals."""
    base = base_class(model, lay, opts)
    cls = f"{opts.profile}/{base}" if opts.profile else base
    return cls + TRANSFERRED if gpu is not None and transferred(gpu) else cls


def parents(mechanism: str) -> list[str]:
    """The classes tried in turn: the class, its framework profile ("torchtitan/"), its mechanism
    without the profile, all rows. A class on a transferred GEMM constant tries its profile's transferred
    rows ("p/@transferred-gemm") and every transferred row ("@transferred-gemm") before the mechanism."""
    chain = [mechanism]
    plain = mechanism.removesuffix(TRANSFERRED)
    profile, base = plain.split("/", 1) if "/" in plain else ("", plain)
    if plain != mechanism:
        chain += ([profile + "/" + TRANSFERRED] if profile else []) + [TRANSFERRED, base]
    elif profile:
        chain += [profile + "/", base]
    return chain + ["all"]


def _member(row_class: str, name: str) -> bool:
    if name == "all" or row_class == name:
        return True
    if name.endswith(TRANSFERRED):  # the transferred rows of a profile ("p/" + suffix) or of all ("" + suffix)
        return row_class.endswith(TRANSFERRED) and _member(row_class, name.removesuffix(TRANSFERRED) or "all")
    if name.endswith("/"):  # a whole framework profile
        return row_class.startswith(name)
    return "/" not in name and row_class.removesuffix(TRANSFERRED).split("/", 1)[-1] == name  # across profiles


def configuration(model, gpu: str, gpus: int, lay) -> str:
    """What leave-one-out leaves out together: one configuration (model shape and depth, sequence
    length, GPU type and count, layout, precision), so that the same run measured with several
    framework versions (the dgxc recipes under 24.12 and 25.02) is not evidence about itself."""
    experts = model.moe.experts if model.moe is not None else 0
    shape = f"tp{lay.tp}-pp{lay.pp}-vpp{lay.vpp}-cp{lay.cp}-ep{lay.ep}-mbs{lay.mbs}-gbs{lay.gbs}"
    return (f"L{model.layers}-h{model.hidden}-a{model.heads}-f{model.ffn_hidden}-e{experts}-s{model.seq_len}"
            f"/{gpus}x{gpu}/{shape}/{lay.precision}")


@dataclass(frozen=True)
class Interval:
    mechanism: str  # the class whose residuals were used ("all" on fallback)
    rows: int  # residuals behind it
    q_low: float  # q10 of ln(predicted / measured)
    q_high: float

    def rate(self, value: float) -> dict:
        """A throughput-like value (higher is faster): {value, p10, p90}."""
        return {"value": value, "p10": value * math.exp(-self.q_high), "p90": value * math.exp(-self.q_low)}

    def duration(self, value: float) -> dict:
        """A time (step time): {value, p10, p90}."""
        return {"value": value, "p10": value * math.exp(self.q_low), "p90": value * math.exp(self.q_high)}

    def covers(self, predicted: float, measured: float) -> bool:
        r = math.log(predicted / measured)
        return self.q_low <= r <= self.q_high


@lru_cache(maxsize=1)
def residual_rows() -> tuple[dict, ...]:
    if not TABLE.exists():
        return ()
    return tuple(json.loads(TABLE.read_text(encoding="utf-8"))["rows"])


def interval(mechanism: str, leave_out_group: str | None = None) -> Interval | None:
    """The class's interval from the stored residuals, without the rows of `leave_out_group`."""
    rows = [r for r in residual_rows() if r["group"] != leave_out_group]
    own: list[float] = []  # the most specific class's residuals, when too few for its own band
    for name in parents(mechanism):  # a class with too few rows borrows its parent's (wider) spread
        mine = sorted(r["log_error"] for r in rows if _member(r["class"], name))
        if len(mine) >= MIN_ROWS:
            lo, hi = conformal_ranks(len(mine))
            if not own:
                return Interval(name, len(mine), mine[lo], mine[hi])
            # the parent's band stretched over the class's own residuals: a small class's bias
            # (a framework's unmodelled cost) is evidence even when it is too small for a band
            return Interval(f"{name}+{mechanism}", len(mine), min(mine[lo], own[0]), max(mine[hi], own[-1]))
        own = own or mine
    return None


def conformal_ranks(n: int) -> tuple[int, int]:
    """0-based ranks of the p10 and p90 bounds among n sorted residuals: the split-conformal
    order statistics floor(0.1 (n+1)) and ceil(0.9 (n+1)) (Vovk et al. 2005; Lei et al., JASA
    2018, s.2.2), which cover a new exchangeable residual with probability >= 80%. They exist
    from n = 9 (MIN_ROWS); a smaller class falls back to its parent."""
    return math.floor(LOW * (n + 1)) - 1, math.ceil(HIGH * (n + 1)) - 1


@lru_cache(maxsize=1)
def _table_ids() -> frozenset[str]:
    return frozenset(r["id"] for r in residual_rows())


def judge(check, model, cluster, lay, opts, predicted: float, measured: float | None) -> None:
    """Fill a validate Check's mechanism, p10/p90 (in the compared quantity's units) and whether
    the measured value falls inside; a row of the table is judged with its configuration left out."""
    check.mechanism = mechanism_class(model, lay, opts, cluster.gpu)
    check.group = configuration(model, cluster.gpu.name, cluster.gpus, lay)
    iv = interval(check.mechanism, check.group if check.id in _table_ids() else None)
    if iv is None or not measured or not predicted:
        return
    band = iv.rate(predicted)
    check.p10, check.p90 = band["p10"], band["p90"]
    check.covered = iv.covers(predicted, measured)


def coverage(checks) -> float | None:
    judged = [c.covered for c in checks if c.covered is not None and c.basis != "run-level"]
    return sum(judged) / len(judged) if judged else None


def write_residuals(sets: list[str] | None = None, path: Path = TABLE) -> dict:
    """Price every built-in validate set and store each compared row's residual; returns the table."""
    from wanka.plan.published import built_in_runs, load_rows
    from wanka.plan.row_check import check_row

    rows = []
    for name in sets or built_in_runs():
        for row in load_rows(name):
            c = check_row(row)
            if c.skipped or c.error is None or c.basis == "run-level" or c.error <= -1:
                continue
            rows.append({"set": name, "id": c.id, "class": c.mechanism, "group": c.group,
                         "basis": c.basis, "log_error": round(math.log1p(c.error), 6)})
    table = {"about": "ln(predicted / measured) of every compared row of the built-in validate sets; "
                      "written by `wanka plan validate --write-residuals` (wanka.plan.uncertainty)",
             "sets": sorted({r["set"] for r in rows}), "rows": rows}
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    residual_rows.cache_clear()
    _table_ids.cache_clear()
    return table
