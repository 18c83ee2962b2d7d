"""`wanka simulate` -- the digital twin from the command line.

    wanka simulate list
    wanka simulate llama3-54d [--runs 20] [--seed 1] [--json] [--report out.html]
    wanka simulate sweep rsc-mttf --param gpus --values 2048,16384,131072 [--json]
    wanka simulate sweep llama3-54d --param checkpoint_interval --values 60,300,900,1800
    wanka simulate fleet philly --gpus 10240 --days 30 --runs 10 [--scale 3.63] [--failure-scale 1]
    wanka simulate failslow [--runs 3] [--seed 0]   # fail-slow detector vs injected truth
"""

from __future__ import annotations

import argparse

from rich.console import Console

from wanka.cli import json_flag
from wanka.errors import SpecError
from wanka.output import check_report_path, fmt, table
from wanka.sim.compile import compile_scenario
from wanka.sim.outputs import simulate
from wanka.sim.scenario import load_scenario, scenario_names
from wanka.sim.sweep import PARAMS, parse_values, sweep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="digital twin: weeks of a cluster with failures and recovery",
                       description="wanka simulate SCENARIO|PRESET | wanka simulate sweep SCENARIO --param P --values a,b | "
                                   "wanka simulate predict SCENARIO | wanka simulate fleet TRACE | wanka simulate list")
    p.add_argument("scenario", help="a scenario preset or YAML/JSON file; or 'sweep' / 'predict' / 'fleet' / 'failslow' / 'list'")
    p.add_argument("target", nargs="?", help="(sweep, predict) the scenario; (fleet) philly or a trace CSV")
    p.add_argument("--runs", type=int, help="Monte-Carlo runs (default: the scenario's)")
    p.add_argument("--seed", type=int, help="seed (default: the scenario's)")
    p.add_argument("--report", metavar="FILE", help="write an HTML report with plots")
    p.add_argument("--param", help=f"(sweep) one of {', '.join(PARAMS)}")
    p.add_argument("--values", help="(sweep) comma-separated values (seconds, nodes or GPUs)")
    p.add_argument("--gpus", type=int, default=10240, help="(fleet) cluster GPUs")
    p.add_argument("--days", type=float, default=30.0, help="(fleet) horizon in days")
    p.add_argument("--scale", type=float, help="(fleet) arrival compression (default: the whole trace in --days)")
    p.add_argument("--failure-scale", type=float, default=1.0, help="(fleet) multiply every failure rate")
    p.add_argument("--workers", type=int, default=1, help="(fleet) processes for the independent runs (same result)")
    json_flag(p)
    p.set_defaults(func=cmd_simulate)


def _check_runs(args) -> None:
    if args.runs is not None and not 1 <= args.runs <= 100000:
        raise SpecError("--runs", "an integer in [1, 100000]", args.runs)
    if args.seed is not None and args.seed < 0:
        raise SpecError("--seed", "an integer >= 0", args.seed)


def cmd_simulate(args):
    _check_runs(args)
    if args.scenario == "list":
        rows = [{"name": n, "description": load_scenario(n).description} for n in scenario_names()]
        return {"scenarios": rows}, lambda c: c.print(table("twin scenarios", ["name", "description"],
                                                            [[r["name"], r["description"]] for r in rows]))
    if getattr(args, "report", None):
        check_report_path(args.report)  # before the (slow) simulation, not after it
    if args.scenario == "sweep":
        return cmd_sweep(args)
    if args.scenario == "predict":
        return cmd_predict(args)
    if args.scenario == "failslow":
        return cmd_failslow(args)
    if args.scenario == "fleet":
        from wanka.sim.fleet_cli import cmd_fleet  # noqa: PLC0415

        return cmd_fleet(args)
    if args.target is not None:
        raise SpecError("target", "nothing after the scenario (did you mean 'wanka simulate sweep ...'?)", args.target)
    sc = load_scenario(args.scenario)
    runs = args.runs or sc.runs
    seed = sc.seed if args.seed is None else args.seed
    if len(sc.jobs) > 1:
        return cmd_multi(sc, runs, seed, args)
    out = simulate(compile_scenario(sc), runs=runs, seed=seed, trace_first=bool(args.report))
    if args.report:
        from wanka.sim.report import write_report  # noqa: PLC0415 (matplotlib only when asked)

        write_report(sc, out, args.report, runs, seed)
    out.pop("_trace", None)
    return out, lambda console: render(console, out, args.report)


def render(console: Console, out: dict, report: str | None) -> None:
    j, e = out["job"], out["ettr"]
    ck = out["checkpoint"]
    console.print(f"[bold]{out['scenario']}[/bold]: {j['gpus']:,} GPUs ({j['dp']} replicas of {j['replica_gpus']}) on "
                  f"{out['cluster']}, {out['duration_days']:g} days x {out['runs']} runs; failures {out['failure_model']}, "
                  f"recovery {out['recovery']}, checkpoint {ck['policy']}/{ck['mode']} every {fmt(ck['interval_s'] / 60)} min")
    u, p = out["interruptions"]["unexpected"], out["interruptions"]["planned"]
    rows = [
        ["ETTR", e["mean"], f"{fmt(e['ci95'][0])} - {fmt(e['ci95'][1])}"],
        ["goodput (GPU-hours incl. spares)", out["goodput"]["mean"], f"{fmt(out['goodput']['ci95'][0])} - {fmt(out['goodput']['ci95'][1])}"],
        ["unexpected interruptions", u["mean"], f"{fmt(u['ci95'][0])} - {fmt(u['ci95'][1])}"],
        ["  expected (rate x time)", out["interruptions"]["expected_unexpected"], ""],
        ["planned interruptions", p["mean"], f"{fmt(p['ci95'][0])} - {fmt(p['ci95'][1])}"],
        ["MTTF (h)", out["mttf_h"]["mean"], f"model {fmt(out['mttf_h']['expected'])}"],
        ["lost work per interruption (h)", out["lost_work_per_interruption_h"]["mean"], ""],
    ]
    rows += [[f"lost GPU-h: {k}", v["mean"], f"{fmt(v['ci95'][0])} - {fmt(v['ci95'][1])}"] for k, v in out["lost_gpu_hours"].items()]
    h = out["replicas"]["mean_healthy"]
    rows.append([f"healthy replicas (of {out['replicas']['dp']})", h["mean"], f"{fmt(h['ci95'][0])} - {fmt(h['ci95'][1])}"])
    if "steps" in out:  # step-level commit semantics (torchft)
        c = out["steps"]["committed_fraction"]
        rows.append(["committed-step fraction", c["mean"], f"{fmt(c['ci95'][0])} - {fmt(c['ci95'][1])}"])
    console.print(table("twin results (mean, 95% of runs)", ["metric", "mean", "95% interval"], rows))
    causes = sorted(out["interruptions"]["by_cause"].items(), key=lambda kv: -kv[1]["mean"])[:8]
    console.print(table("interruptions by cause (mean per run)", ["cause", "mean"], [[k, v["mean"]] for k, v in causes]))
    if report:
        console.print(f"report written to {report}")


def cmd_failslow(args):
    from wanka.reliability.failslow import study  # noqa: PLC0415

    seed = 0 if args.seed is None else args.seed
    rows = [{"seed": seed + i, **study(seed=seed + i)} for i in range(args.runs or 3)]
    keys = ["episodes", "flags", "precision", "recall", "recall_visible", "latency_s_median", "recovered_share"]

    def render(console: Console) -> None:
        console.print(table("fail-slow detection vs injected truth (512 nodes x 12 h each; docs/reliability.md)",
                            ["seed"] + keys, [[r["seed"]] + [r[k] for k in keys] for r in rows]))

    return {"runs": rows}, render


def cmd_predict(args):
    from wanka.sim.predict import drain_study  # noqa: PLC0415 (scikit-learn only when asked)

    if args.target is None:
        raise SpecError("scenario", "a scenario: wanka simulate predict SCENARIO")
    sc = load_scenario(args.target)
    if len(sc.jobs) > 1:
        raise SpecError("scenario", "a single-job scenario for the drain study", args.target)
    out = drain_study(sc, runs=args.runs, seed=args.seed)

    def render_predict(console: Console) -> None:
        p = out["predictor"]
        console.print(f"predictor on held-out simulated days ({p['train_nodes']} nodes x {p['train_hours']} h): "
                      f"precision {fmt(p['precision'])}, recall {fmt(p['recall'])} "
                      f"({fmt(p['recall_with_precursor'])} of failures with precursors), median lead "
                      f"{fmt(p['lead_time_h_median'])} h, {fmt(p['false_alarms_per_node_day'])} false alarms per node-day")
        rows = [[label, o["ettr"]["mean"], o["unexpected"]["mean"], o["averted_failures"]["mean"],
                 o["false_drains"]["mean"], o["lost_gpu_hours"]["lost_work"]]
                for label, o in (("no drain", out["without_drain"]), ("drain before predicted", out["with_drain"]))]
        console.print(table(f"drain-and-migrate on {out['scenario']}", ["policy", "ETTR", "unexpected", "averted",
                                                                        "false drains", "lost work GPU-h"], rows))

    return out, render_predict


def cmd_multi(sc, runs: int, seed: int, args):
    from wanka.sim.multijob import simulate_cluster  # noqa: PLC0415

    out = simulate_cluster(sc, runs=runs, seed=seed, trace_first=bool(args.report))
    if args.report:
        from wanka.sim.report_multi import write_multi_report  # noqa: PLC0415 (matplotlib only when asked)

        write_multi_report(sc, out, args.report)
    out.pop("_trace", None)

    def render_multi(console: Console) -> None:
        console.print(f"[bold]{out['scenario']}[/bold]: {len(out['jobs'])} jobs on {out['cluster']}, "
                      f"{out['duration_days']:g} days x {out['runs']} runs; cluster goodput "
                      f"{fmt(out['cluster_goodput']['mean'])}, ETTR job-weighted {fmt(out['ettr_job_weighted'])}, "
                      f"GPU-hour-weighted {fmt(out['ettr_gpu_hour_weighted'])}")
        rows = [[j["name"], j["gpus"], j["ettr"]["mean"], j["finished"]["mean"], j["completion_h"]["mean"],
                 j["interruptions"]["mean"], j["preemptions"]["mean"]] for j in out["jobs"]]
        console.print(table("jobs (mean over runs)", ["job", "GPUs", "ETTR", "finished", "completion h",
                                                      "interruptions", "preemptions"], rows))
        if args.report:
            console.print(f"report written to {args.report}")

    return out, render_multi


def cmd_sweep(args):
    if args.target is None:
        raise SpecError("scenario", "a scenario to sweep: wanka simulate sweep SCENARIO --param P --values a,b")
    if args.param not in PARAMS:
        raise SpecError("--param", f"one of {', '.join(PARAMS)}", args.param)
    if not args.values:
        raise SpecError("--values", "comma-separated values like 600,1800,3600")
    sc = load_scenario(args.target)
    out = sweep(sc, args.param, parse_values(args.values, args.param), runs=args.runs, seed=args.seed)

    def render_sweep(console: Console) -> None:
        if out.get("mode") == "multi-job":
            cols = [args.param, "cluster goodput", "ETTR job-weighted", "ETTR GPU-h-weighted", "job interruptions",
                    "jobs finished"]
            rows = [[r["value"], r["cluster_goodput"]["mean"], r["ettr_job_weighted"], r["ettr_gpu_hour_weighted"],
                     r["job_interruptions"]["mean"], r["jobs_finished"]] for r in out["rows"]]
            console.print(table(f"sweep of {args.param} on {sc.name} ({len(sc.jobs)} jobs)", cols, rows))
            return
        cols = [args.param, "ETTR", "ETTR 95%", "unexpected", "MTTF h", "ckpt interval min", "goodput"]
        rows = [[r["value"], r["ettr"]["mean"], f"{fmt(r['ettr']['ci95'][0])} - {fmt(r['ettr']['ci95'][1])}",
                 r["unexpected"]["mean"], r["mttf_h"]["mean"], r["checkpoint_interval_s"] / 60, r["goodput"]["mean"]]
                for r in out["rows"]]
        console.print(table(f"sweep of {args.param} on {sc.name}", cols, rows))

    return out, render_sweep
