"""Monte-Carlo runs of a compiled scenario and their summary (mean and 95% interval over runs).

Every statistic is given as {mean, ci95, mean_ci95}: `ci95` is the central 95% interval of the
per-run values (2.5th-97.5th percentile: where one run lands), `mean_ci95` the normal-approximation
95% confidence interval of the mean (mean +- 1.96 s/sqrt(runs)).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wanka.sim.compile import Compiled
from wanka.sim.engine import CATEGORIES, simulate_run

LOSS_KEYS = [k for k in CATEGORIES if k != "useful"]


def stat(values) -> dict[str, Any]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"mean": None, "ci95": [None, None], "mean_ci95": [None, None]}
    mean = float(v.mean())
    half = 1.96 * float(v.std(ddof=1)) / math.sqrt(v.size) if v.size > 1 else 0.0
    lo, hi = np.percentile(v, [2.5, 97.5])
    return {"mean": mean, "ci95": [float(lo), float(hi)], "mean_ci95": [mean - half, mean + half]}


def run_seeds(seed: int, runs: int) -> list[np.random.SeedSequence]:
    """Run i always gets the same stream, whatever the number of runs."""
    return np.random.SeedSequence(seed).spawn(runs)


def simulate(comp: Compiled, runs: int | None = None, seed: int | None = None, trace_first: bool = False) -> dict:
    sc, cfg = comp.scenario, comp.config
    runs = sc.runs if runs is None else runs
    seed = sc.seed if seed is None else seed
    results = [simulate_run(cfg, s, trace=trace_first and i == 0) for i, s in enumerate(run_seeds(seed, runs))]
    return summarise(comp, results, runs, seed)


def summarise(comp: Compiled, results: list[dict], runs: int, seed: int) -> dict:
    sc, cfg = comp.scenario, comp.config
    wall = cfg.duration_s
    gpu_h = cfg.gpus / 3600.0
    acc = {k: np.array([r["acc"][k] for r in results]) for k in CATEGORIES}
    by_cause = np.array([r["by_cause"] for r in results])
    unexpected = by_cause.sum(axis=1)
    counts = {k: np.array([r["counts"][k] for r in results]) for k in results[0]["counts"]}
    hours = wall / 3600.0
    mttf = np.where(unexpected > 0, hours / np.maximum(unexpected, 1), np.inf)
    lam_h = cfg.failures.rate_per_hour(cfg.gpus, cfg.gpus_per_node)
    reserved_gpus = cfg.gpus + comp.reserved_spares * cfg.gpus_per_node
    useful_gpu_h = acc["useful"] * gpu_h
    out: dict[str, Any] = {
        "scenario": sc.name,
        "runs": runs,
        "seed": seed,
        "duration_days": sc.duration_days,
        "cluster": comp.cluster.name,
        "job": {"name": sc.jobs[0].name, "gpus": cfg.gpus, "nodes": cfg.nodes, "dp": cfg.dp,
                "replica_gpus": comp.speed.replica_gpus, "step_time_s": comp.speed.step_time_s,
                "tokens_per_s": comp.speed.tokens_per_s, "speed_source": comp.speed.source},
        "failure_model": cfg.failures.name,
        "recovery": cfg.kind,
        "checkpoint": comp.checkpoint,
        "ettr": stat(acc["useful"] / wall),
        "goodput": stat(useful_gpu_h / (reserved_gpus * hours)),
        "interruptions": {
            "unexpected": stat(unexpected),
            "planned": stat(counts["planned"]),
            "expected_unexpected": lam_h * hours,
            "manual": stat(counts["manual"]),
            "correlated": stat(counts["correlated"]),  # rack / leaf / spine failures (several nodes at once)
            "by_cause": {c.name: stat(by_cause[:, i]) for i, c in enumerate(cfg.failures.causes)},
        },
        "mttf_h": {**stat(mttf), "expected": (1.0 / lam_h) if lam_h > 0 else None},
        "lost_gpu_hours": {k: stat(acc[k] * gpu_h) for k in LOSS_KEYS},
        "lost_work_per_interruption_h": stat(acc["lost_work"] / np.maximum(unexpected, 1) / 3600.0),
        "useful_gpu_hours": stat(useful_gpu_h),
        "spares": {"pool_nodes": cfg.spares, "swaps": stat(counts["swaps"]), "waits": stat(counts["waits"]),
                   "min_available": stat(counts["pool_min"]), "elastic_shrinks": stat(counts["shrinks"]),
                   "nodes_lost_in_group_failures": stat(counts["blast_nodes"])},
        "prediction": {"drains": stat(counts["drains"]), "false_drains": stat(counts["false_drains"]),
                       "averted_failures": stat(counts["averted"])},
        "stragglers": stat(counts["stragglers"]),
    }
    out["replicas"] = {"dp": cfg.dp, "mean_healthy": stat(counts["mean_replicas"])}
    if cfg.step_time_s > 0:  # step-level commit semantics (torchft)
        attempted = counts["committed_steps"] + counts["discarded_steps"]
        out["steps"] = {"step_time_s": cfg.step_time_s, "committed": stat(counts["committed_steps"]),
                        "discarded": stat(counts["discarded_steps"]),
                        "committed_fraction": stat(counts["committed_steps"] / np.maximum(attempted, 1))}
    if comp.speed.tokens_per_s:
        out["tokens_trained"] = stat(acc["useful"] * comp.speed.tokens_per_s)
    if results[0]["trace"] is not None:
        out["_trace"] = results[0]["trace"]
    return out
