"""`wanka plan calibrate`: fit a cluster's efficiency constants to measured runs and write a
cluster profile that `wanka plan --cluster` and `wanka simulate` (scenario `cluster:`) accept.

    wanka plan calibrate --runs runs/ --cluster wanka-10k --out wanka-10k-calibrated.yaml
    wanka plan calibrate --runs my_runs.json --cluster my.yaml --fit gemm,network --out my-cal.yaml
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import yaml
from rich.console import Console

from wanka.cli import json_flag
from wanka.errors import SpecError
from wanka.output import table
from wanka.plan.calibrate import CONSTANTS, Pricer, fit, held_out_errors, load_runs, parse_constants, require_enough
from wanka.specfile import load_spec


def register(psub: argparse._SubParsersAction) -> None:
    c = psub.add_parser("calibrate", help="fit the cluster's GEMM/attention/HBM/network efficiency to measured runs")
    c.add_argument("--runs", required=True, help="published-run JSON (the validate schema), a `wanka train` run "
                   "directory (metrics.jsonl), or a directory of either")
    c.add_argument("--cluster", required=True, help="the cluster the runs were measured on (preset or spec file)")
    c.add_argument("--out", required=True, help="cluster profile to write (.yaml)")
    c.add_argument("--fit", help=f"constants to fit, comma-separated (default all: {','.join(CONSTANTS)})")
    json_flag(c)
    c.set_defaults(func=cmd_calibrate)


def _median_abs(xs: list[float]) -> float:
    return statistics.median(abs(x) for x in xs)


def cmd_calibrate(args):
    constants = parse_constants(args.fit)
    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml"):
        raise SpecError("--out", "a .yaml file path", args.out)
    if not out.parent.is_dir():
        raise SpecError("--out", "a path in an existing directory", args.out)
    runs, skipped = load_runs(args.runs)
    pricer = Pricer(args.cluster)
    runs, other_gpu = pricer.same_gpu(runs)
    skipped += other_gpu
    require_enough(runs, constants)
    pricer.check(runs)
    before, after, scheme = held_out_errors(pricer, runs, constants)
    scales = fit(pricer, runs, constants)
    data, _ = load_spec(args.cluster, "wanka.cluster", "cluster")
    profile = {**data, "name": f"{data.get('name', 'cluster')}-calibrated",
               "efficiency": {k: round(v, 4) for k, v in scales.items()}}
    header = (f"# written by `wanka plan calibrate` from {len(runs)} measured runs ({args.runs}) on {args.cluster};\n"
              f"# fitted: {', '.join(constants)} (multipliers on the planner's constants, docs/plan.md \"Calibrate\").\n"
              f"# {scheme} step-time median |error|: before {_median_abs(before):.1%}, after {_median_abs(after):.1%}\n")
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(header + yaml.safe_dump(profile, sort_keys=False), encoding="utf-8")
    os.replace(tmp, out)  # nothing half-written
    payload = {"out": str(out), "cluster": args.cluster, "runs": len(runs), "fitted": list(constants),
               "efficiency": profile["efficiency"], "held_out": scheme,
               "median_abs_error_before": _median_abs(before), "median_abs_error_after": _median_abs(after),
               "rows": [{"id": r.id, "gpus": r.gpus, "measured_step_s": r.step_time_s, "error_before": b,
                         "error_after": a} for r, b, a in zip(runs, before, after)],
               "skipped": skipped}

    def render(console: Console) -> None:
        console.print(table(f"step time, {scheme}: predicted / measured - 1", ["run", "GPUs", "measured s", "before",
                                                                              "after"],
                            [[r.id, r.gpus, r.step_time_s, f"{b:+.1%}", f"{a:+.1%}"] for r, b, a in zip(runs, before, after)]))
        console.print(f"median |error| before {payload['median_abs_error_before']:.1%}, after "
                      f"{payload['median_abs_error_after']:.1%} ({scheme}: each run predicted without itself)")
        console.print("fitted multipliers: " + ", ".join(f"{k} {v:.3g}" for k, v in profile["efficiency"].items()
                                                        if k in constants) + f"; wrote {out}")
        for note in skipped:
            console.print(f"skipped {note}", soft_wrap=True)

    return payload, render
