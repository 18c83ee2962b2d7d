"""Goodput-optimal planning: layout, checkpoint interval, spare pool and recovery kind chosen together.

    wanka plan --model llama3-405b --cluster wanka-10k --objective goodput [--json]

The planner (wanka.plan.search) gives its fastest layouts and their speed; the twin (wanka.sim, one
job) gives each plan's effective training time ratio under the failure model. A plan's objective
is tokens per day = ETTR x the planner's tokens/s x 86,400. The grid, for each of the top layouts:
  * job size: all the cluster's GPUs, or one or two data-parallel replicas fewer (the GPUs freed
    become a hot-spare pool, or stay idle);
  * recovery: full_restart, hot_spare (with a pool), torchft (per-step fault tolerance);
  * checkpoint interval: Daly's optimum (Daly 2006) x 0.5, 1, 2.
Every plan is screened with a few twin runs on the same seeds; the best plans and the baseline
("fastest layout + Daly interval": full restart, the fewest replicas given up for a ByteRobust P99
spare pool, since with no pool a node failure waits for its repair) are then run with more runs, and
the answer is the best plan whose 95% interval of mean tokens/day lies above the baseline's, or a
statement that none does. The frontier lists, per GPUs reserved (job + spares), the best plan.
"""

from __future__ import annotations

import math
import time
from itertools import product
from dataclasses import replace

from wanka.errors import SpecError
from wanka.reliability.failures import load_failure_model
from wanka.reliability.spares import p99_spares
from wanka.sim.compile import compile_scenario
from wanka.sim.outputs import simulate
from wanka.sim.scenario import parse_scenario
from wanka.sim.speeds import load_sized_cluster

# checkpoint costs of a 405B job: ByteCheckpoint Table 8, 405B on 8,960 GPUs: block 0.59 s, save 51.06 s,
# load 129.49 s [Q] (the same figures as the llama3-54d preset)
CHECKPOINT = {"mode": "async", "stall_s": 0.59, "write_s": 51.06, "restore_s": 129.49}
RECOVERY = {"detect_s": 60, "restart_s": 300}  # ByteRobust section 2.2 [P]; Meta RSC u0 lower end [Q]
RECOVERY_REPAIR_H = 24.0  # the twin's default repair time [G]
KINDS = ("full_restart", "hot_spare", "torchft")
INTERVAL_FACTORS = (0.5, 1.0, 2.0)


def _scenario(cluster_ref, layout_str: str, gpus: int, step_s: float, kind: str, spares: int, ckpt: dict,
              failures: str, days: float, runs: int, seed: int):
    return parse_scenario({
        "name": "goodput-plan", "cluster": cluster_ref,
        "jobs": [{"name": "job", "layout": layout_str, "gpus": gpus, "step_time_s": step_s}],
        "failures": {"model": failures}, "checkpoint": {**CHECKPOINT, **ckpt},
        "recovery": {**RECOVERY, "kind": kind, "spares": spares}, "duration_days": days, "runs": runs, "seed": seed})


def _layout_str(lay) -> str:
    return f"tp={lay.tp},pp={lay.pp},cp={lay.cp}"


def plan_goodput(model, cluster_ref: str, gpus: int | None = None, top: int = 3, failures: str = "llama3-h100",
                 days: float = 30.0, screen_runs: int = 6, final_runs: int = 30, seed: int = 1) -> dict:
    from wanka.plan.estimate import estimate  # noqa: PLC0415 (plan sits beside sim)
    from wanka.plan.search import search  # noqa: PLC0415

    t0 = time.perf_counter()
    cluster = load_sized_cluster(cluster_ref, gpus)
    gpn = cluster.gpus_per_node
    layouts = search(model, cluster, top=top)
    if not layouts:
        raise SpecError("--model", f"a model with a layout that fits {cluster.name}", model.name)
    plans = []
    for li, est in enumerate(layouts):
        lay = est.layout
        replica = lay.tp * lay.pp * lay.cp
        for fewer in (0, 1, 2):
            dp = lay.dp - fewer
            if dp < 1:
                continue
            job_gpus = dp * replica
            if fewer == 0:
                speed = est
            else:  # the same layout on fewer replicas, the nearest batch they split (micro-batches a multiple
                # of pp when interleaved), priced by the planner
                per = dp * lay.mbs * (lay.pp if lay.vpp > 1 else 1)
                gbs = max(per, round(lay.gbs / per) * per)
                try:
                    speed = estimate(model, load_sized_cluster(cluster_ref, job_gpus), replace(lay, dp=dp, gbs=gbs))
                except (SpecError, ValueError):
                    continue
                if not speed.fits:
                    continue
            # the freed GPUs become the spare pool, or go back to the cluster (not reserved)
            for spare_nodes, kind, factor in product(sorted({0, fewer * replica // gpn}), KINDS, INTERVAL_FACTORS):
                if kind == "hot_spare" and spare_nodes == 0:
                    continue
                plans.append({"layout_rank": li + 1, "layout": _layout_str(lay), "gbs": speed.layout.gbs,
                              "gpus": job_gpus, "spare_nodes": spare_nodes, "reserved_gpus": job_gpus + spare_nodes * gpn,
                              "kind": kind, "interval_factor": factor, "step_time_s": speed.step_time_s,
                              "tokens_per_s": speed.tokens_per_s})
    # Daly's interval for each (job size, kind): from the twin's own compile (policy daly)
    daly: dict = {}

    def evaluate(p: dict, runs: int) -> dict:
        key = (p["layout"], p["gpus"], p["kind"], p["spare_nodes"])
        if key not in daly:
            comp = compile_scenario(_scenario(cluster_ref, p["layout"], p["gpus"], p["step_time_s"], p["kind"],
                                              p["spare_nodes"], {"policy": "daly"}, failures, days, 1, seed), cluster=cluster)
            daly[key] = comp.checkpoint["interval_s"]
        interval = max(daly[key] * p["interval_factor"], CHECKPOINT["write_s"])  # async: one write in flight
        sc = _scenario(cluster_ref, p["layout"], p["gpus"], p["step_time_s"], p["kind"], p["spare_nodes"],
                       {"policy": "fixed", "interval_s": interval}, failures, days, runs, seed)
        out = simulate(compile_scenario(sc, cluster=cluster))
        per_day = p["tokens_per_s"] * 86400.0
        return {**p, "interval_s": float(interval), "ettr": out["ettr"]["mean"],
                "tokens_per_day": out["ettr"]["mean"] * per_day,
                "tokens_per_day_ci95": [v * per_day for v in out["ettr"]["mean_ci95"]], "runs": runs}

    screened = sorted((evaluate(p, screen_runs) for p in plans), key=lambda r: -r["tokens_per_day"])
    # the baseline: the fastest layout with the fewest replicas given up for a ByteRobust P99 pool (with no
    # pool a node failure waits for its repair), full restart, Daly's interval
    need = p99_spares(load_failure_model(failures), cluster.gpus, gpn, window_h=RECOVERY_REPAIR_H)
    base_plan = min((p for p in plans if p["layout_rank"] == 1 and p["spare_nodes"] >= need
                     and p["kind"] == "full_restart" and p["interval_factor"] == 1.0),
                    key=lambda p: p["spare_nodes"], default=None)
    if base_plan is None:
        raise SpecError("--model", f"a fastest layout that leaves room for a P99 pool of {need} nodes", model.name)
    baseline = evaluate(base_plan, final_runs)
    finalists = [evaluate(p, final_runs) for p in screened[:3]]
    best = max(finalists, key=lambda r: r["tokens_per_day"])
    beats = best["tokens_per_day_ci95"][0] > baseline["tokens_per_day_ci95"][1]
    frontier = {}
    for r in screened:
        cur = frontier.get(r["reserved_gpus"])
        if cur is None or r["tokens_per_day"] > cur["tokens_per_day"]:
            frontier[r["reserved_gpus"]] = r
    pareto, top_tpd = [], -math.inf
    for g in sorted(frontier):  # keep a size only if it adds tokens/day over every smaller one
        if frontier[g]["tokens_per_day"] > top_tpd:
            pareto.append(frontier[g])
            top_tpd = frontier[g]["tokens_per_day"]
    verdict = ("the chosen plan beats the baseline: its 95% interval of mean tokens/day lies above the baseline's"
               if beats else
               "no plan beats the baseline with non-overlapping 95% intervals: the best plan's interval overlaps "
               "the baseline's (failures cost too little here for recovery or checkpoint choices to matter)")
    return {"objective": "goodput", "model": model.name, "cluster": cluster.name, "gpus": cluster.gpus,
            "baseline_rule": f"fastest layout, {base_plan['spare_nodes']} spare nodes (>= the P99 pool of {need}), "
                             "full_restart, Daly interval",
            "failure_model": failures, "days": days, "plans_evaluated": len(plans),
            "chosen": best, "baseline": baseline, "beats_baseline": beats, "verdict": verdict,
            "frontier": pareto, "seconds": time.perf_counter() - t0}


def render_goodput(console, out: dict) -> None:
    from wanka.output import fmt, table  # noqa: PLC0415

    def row(label, r):
        lo, hi = r["tokens_per_day_ci95"]
        return [label, f"{r['layout']},gbs={r['gbs']}", r["gpus"], r["spare_nodes"], r["kind"], r["interval_s"] / 60,
                r["ettr"], f"{r['tokens_per_day'] / 1e9:.2f}", f"{lo / 1e9:.2f} - {hi / 1e9:.2f}"]

    cols = ["plan", "layout", "GPUs", "spare nodes", "recovery", "ckpt min", "ETTR", "B tokens/day", "95% CI of mean"]
    console.print(table(f"goodput plan: {out['model']} on {out['cluster']} ({out['gpus']:,} GPUs), failures "
                        f"{out['failure_model']}, {fmt(out['days'])}-day twin", cols,
                        [row("chosen", out["chosen"]), row("baseline", out["baseline"])]))
    console.print(f"baseline: {out['baseline_rule']}", soft_wrap=True)
    console.print(out["verdict"], soft_wrap=True)
    console.print(table("frontier: best plan per GPUs reserved (job + spares)", cols[:1] + ["reserved GPUs"] + cols[1:-1],
                        [[f"#{i + 1}", r["reserved_gpus"]] + row("", r)[1:-1] for i, r in enumerate(out["frontier"])]))
    console.print(f"{out['plans_evaluated']} plans screened in {fmt(out['seconds'])} s")
