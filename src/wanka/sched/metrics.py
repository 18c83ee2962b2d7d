"""Metrics of a replay (docs/sched.md "Metrics"; definitions as in sched_network.md section 2.3).

* JCT = end - submit (mean, p50, p95, p99); queueing delay = first start - submit.
* utilization = allocated GPU-s / (cluster GPUs * makespan); effective utilization weighs each
  GPU-second by the job's speed factor (a badly placed job does less work per GPU-second).
* fragmentation = free GPUs the head-of-queue gang cannot use at minimal spread / free GPUs,
  both integrated over the time a head waits (0 when the queue never blocks). When the head waits
  because fewer GPUs are free than it needs, every free GPU counts as unusable, so under saturation
  this tends to 1; `stranded_gpu_share` = the same unusable GPU-s / (cluster GPUs * makespan) says
  how much of the cluster that is.
* minimal_spread_share = gang starts (>1 GPU) that touch the fewest nodes and topology groups
  possible on the cluster / all gang starts.
* per-tenant share = tenant GPU-s / all allocated GPU-s, next to quota / sum of quotas.
"""

from __future__ import annotations

import numpy as np

from wanka.sched.replay import ReplayResult


def summarize(r: ReplayResult) -> dict:
    s, acc = r.scheduler, r.integrals
    done = [s.jobs[j.id] for j in r.jobs if s.jobs[j.id].status == "done"]
    jct = np.array([js.end_s - js.job.submit_s for js in done]) if done else np.zeros(0)
    wait = np.array([js.first_start_s - js.job.submit_s for js in done]) if done else np.zeros(0)
    span = max(r.makespan_s, 1e-9)
    gpus = s.cluster.gpus
    gangs = s.stats["gang_starts"]
    out = {
        "jobs": len(r.jobs),
        "finished": len(done),
        "unfinished": len(r.jobs) - len(done),
        "mean_jct_s": _stat(jct, np.mean),
        "p50_jct_s": _pct(jct, 50),
        "p95_jct_s": _pct(jct, 95),
        "p99_jct_s": _pct(jct, 99),
        "mean_queue_s": _stat(wait, np.mean),
        "p95_queue_s": _pct(wait, 95),
        "makespan_s": r.makespan_s,
        "utilization": acc.allocated_gpu_s / (gpus * span),
        "effective_utilization": acc.effective_gpu_s / (gpus * span),
        "fragmentation": acc.frag_gpu_s / acc.free_when_queued_gpu_s if acc.free_when_queued_gpu_s else 0.0,
        "stranded_gpu_share": acc.frag_gpu_s / (gpus * span),
        "queue_blocked_share": acc.queued_s / span,
        "gang_starts": gangs,
        "minimal_spread_share": s.stats["gang_minimal"] / gangs if gangs else None,
        "preemptions": s.stats["preemptions"],
        "lost_work_gpu_s": sum(js.lost_work_s * js.job.gpus for js in s.jobs.values()),
        "resizes": s.stats["resizes"],
        "backfilled": s.stats["backfilled"],
        "offered_load": sum((j.duration_s or 0) * j.gpus for j in r.jobs) / (gpus * span),
        "events": r.events,
        "replay_wall_s": r.wall_s,
        "replay_cpu_s": r.cpu_s,
    }
    total = sum(acc.tenant_gpu_s.values())
    if total:
        quotas = s.quotas or {}
        qsum = sum(quotas.values())
        out["tenants"] = {t: {"share": v / total, "quota_share": (quotas[t] / qsum if qsum and t in quotas else None),
                              "mean_gpus": v / span}
                          for t, v in sorted(acc.tenant_gpu_s.items())}
    return out


def _stat(a: np.ndarray, fn) -> float | None:
    return float(fn(a)) if len(a) else None


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) if len(a) else None
