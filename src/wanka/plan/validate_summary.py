"""The statistics `wanka plan validate` prints over its compared rows (docs/plan.md "Validate"):
median, p90 and max |error| overall and per framework family, p10-p90 coverage, and the run-level
rows' own median."""

from __future__ import annotations

import math
import statistics


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values`, linear between order statistics (numpy's default)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def summary(checks: list) -> dict:
    """Error statistics over steady-state comparisons (tokens/s, MFU, HFU), overall and per
    framework family; run-level rows (whole-run averages, priced as steady state x goodput) have
    their own `run_level` median and stay out of the steady-state statistics."""
    from wanka.plan.uncertainty import coverage

    compared = [c for c in checks if c.error is not None and not c.skipped and c.basis != "run-level"]
    errs = [abs(c.error) for c in compared]
    families: dict[str, list[float]] = {}
    for c in compared:
        families.setdefault(c.family or "unrecognised", []).append(abs(c.error))
    run = [abs(c.error) for c in checks if c.error is not None and not c.skipped and c.basis == "run-level"]
    return {"rows": len(checks), "compared": len(errs), "skipped": sum(1 for c in checks if c.skipped),
            "run_level": {"compared": len(run), "median_abs_error": statistics.median(run) if run else None},
            "median_abs_error": statistics.median(errs) if errs else None,
            "p90_abs_error": quantile(errs, 0.9) if errs else None, "max_abs_error": max(errs) if errs else None,
            "p10_p90_coverage": coverage(checks),
            "by_family": {f: {"compared": len(e), "median_abs_error": statistics.median(e),
                              "p90_abs_error": quantile(e, 0.9)} for f, e in sorted(families.items())}}
