"""Outputs of the whole-cluster twin (wanka.sim.fleet): per-job accounts and the cluster summary.

Per job, useful + lost + restart + checkpoint_stall + queued = wall (submission to completion or the
horizon); `accounting_max_error_s` reports how well that closes. Per-job ETTR is useful / (end - first
start), as in the multi-job twin; cluster goodput is useful GPU-hours over the cluster's GPU-hours.
"""

from __future__ import annotations

import numpy as np

from wanka.sim.outputs import stat

CATEGORIES = ("useful", "lost", "restart", "checkpoint_stall", "queued")


def job_accounts(run, horizon: float, submit_s: np.ndarray) -> dict[str, np.ndarray]:
    """Per arrived job of a run (a FleetRunResult or a _FleetRun): each category and the wall time
    (submission to completion or horizon), seconds."""
    n = run.arrived
    out = {k: np.array(run.acc[k][:n], dtype=float) for k in CATEGORIES}
    end = np.array(run.end[:n], dtype=float)
    out["wall"] = np.where(np.isnan(end), horizon, end) - submit_s[:n]
    out["run_wall"] = np.where(np.isnan(end), horizon, end) - np.array(run.first_start[:n], dtype=float)  # nan: never started
    return out


def summarise_fleet(cfg, tr, per_run: list, runs: int, seed: int) -> dict:
    """The summary over runs (cfg: a FleetConfig, tr: a FleetTrace, per_run: FleetRunResults)."""
    horizon = cfg.days * 86400.0
    cap_gpu_s = cfg.gpus * horizon
    rows = {k: [] for k in ("goodput", "utilization", "ettr_job", "ettr_gpu_h", "ettr_p10", "queue_h_mean",
                            "queue_h_p95", "finished", "failures", "job_failures", "preemptions", "closure")}
    lost = {k: [] for k in CATEGORIES if k != "useful"}
    for run in per_run:
        acc = job_accounts(run, horizon, tr.submit_s)
        g = tr.gpus[:run.arrived].astype(float)
        started = acc["run_wall"] > 0  # ETTR as the job twins: useful / (end - first start)
        ettr = acc["useful"][started] / acc["run_wall"][started]
        rows["goodput"].append((acc["useful"] * g).sum() / cap_gpu_s)
        busy = acc["useful"] + acc["lost"] + acc["restart"] + acc["checkpoint_stall"]
        rows["utilization"].append((busy * g).sum() / cap_gpu_s)
        rows["ettr_job"].append(ettr.mean())
        w = (acc["run_wall"] * g)[started]
        rows["ettr_gpu_h"].append((ettr * w).sum() / w.sum())
        rows["ettr_p10"].append(np.percentile(ettr, 10))
        rows["queue_h_mean"].append(acc["queued"].mean() / 3600.0)
        rows["queue_h_p95"].append(np.percentile(acc["queued"], 95) / 3600.0)
        rows["finished"].append(float(np.isfinite(np.array(run.end[:run.arrived])).mean()))
        for k in ("failures", "job_failures", "preemptions"):
            rows[k].append(run.c[k])
        total = sum(acc[k] for k in CATEGORIES)
        rows["closure"].append(float(np.abs(total - acc["wall"]).max()))
        for k in lost:
            lost[k].append((acc[k] * g).sum() / 3600.0)
    return {
        "trace": tr.name, "jobs_arrived": int(per_run[0].arrived), "gpus": cfg.gpus, "days": cfg.days,
        "runs": runs, "seed": seed, "failure_model": cfg.failure_model, "failure_scale": cfg.failure_scale,
        "recovery": cfg.recovery.kind,
        "cluster_goodput": stat(rows["goodput"]), "utilization": stat(rows["utilization"]),
        "ettr_job_weighted": stat(rows["ettr_job"]), "ettr_gpu_hour_weighted": stat(rows["ettr_gpu_h"]),
        "ettr_p10": stat(rows["ettr_p10"]),
        "queue_h": {"mean": stat(rows["queue_h_mean"]), "p95": stat(rows["queue_h_p95"])},
        "jobs_finished": stat(rows["finished"]),
        "failures": stat(rows["failures"]), "job_interruptions": stat(rows["job_failures"]),
        "preemptions": stat(rows["preemptions"]),
        "gpu_hours": {k: stat(v) for k, v in lost.items()},
        "accounting_max_error_s": max(rows["closure"]),
    }
