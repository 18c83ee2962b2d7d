"""`wanka simulate fleet TRACE`: the whole-cluster twin (wanka.sim.fleet) from the command line."""

from __future__ import annotations

import math

from rich.console import Console

from wanka.errors import SpecError
from wanka.output import fmt, table
from wanka.sim.fleet import FleetConfig, load_fleet_trace, simulate_fleet

PHILLY_SPAN_DAYS = 108.9  # submit span of the shipped Philly list (82,247 jobs), measured from the file


def cmd_fleet(args):
    if args.target is None:
        raise SpecError("trace", "a trace: wanka simulate fleet philly (or a CSV file)")
    if args.scale is not None and not (math.isfinite(args.scale) and args.scale > 0):
        raise SpecError("--scale", "a number > 0 (arrival-rate multiplier)", args.scale)
    if not 1 <= args.workers <= 256:
        raise SpecError("--workers", "an integer in [1, 256]", args.workers)
    cfg = FleetConfig(gpus=args.gpus, days=args.days, failure_scale=args.failure_scale)
    scale = args.scale if args.scale is not None else (PHILLY_SPAN_DAYS / args.days if args.target == "philly" else 1.0)
    trace = load_fleet_trace(args.target, scale=scale)
    out = simulate_fleet(cfg, trace, runs=args.runs or 10, seed=0 if args.seed is None else args.seed,
                         workers=args.workers)
    out["arrival_scale"] = scale

    def render(console: Console) -> None:
        console.print(f"[bold]{out['trace']}[/bold] x{fmt(scale)} arrivals: {out['jobs_arrived']:,} jobs on "
                      f"{out['gpus']:,} GPUs, {fmt(out['days'])} days x {out['runs']} runs; failures "
                      f"{out['failure_model']} x{fmt(out['failure_scale'])}, recovery {out['recovery']}")
        rows = [[k, out[k]["mean"], f"{fmt(out[k]['ci95'][0])} - {fmt(out[k]['ci95'][1])}"]
                for k in ("cluster_goodput", "utilization", "ettr_job_weighted", "ettr_gpu_hour_weighted", "ettr_p10",
                          "jobs_finished", "failures", "job_interruptions", "preemptions")]
        rows += [[f"queue h ({k})", v["mean"], f"{fmt(v['ci95'][0])} - {fmt(v['ci95'][1])}"] for k, v in out["queue_h"].items()]
        rows += [[f"GPU-h: {k}", v["mean"], f"{fmt(v['ci95'][0])} - {fmt(v['ci95'][1])}"] for k, v in out["gpu_hours"].items()]
        console.print(table("whole-cluster twin (mean, 95% of runs)", ["metric", "mean", "95% interval"], rows))

    return out, render
