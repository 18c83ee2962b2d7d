"""One-parameter sweeps of a scenario: checkpoint interval, spare pool size, or job/cluster size."""

from __future__ import annotations

import math
from typing import Any

from wanka.errors import SpecError
from wanka.sim.compile import compile_scenario
from wanka.sim.outputs import simulate
from wanka.sim.scenario import Scenario, parse_scenario
from wanka.sim.speeds import load_sized_cluster

PARAMS = ("checkpoint_interval", "spares", "gpus")


def parse_values(text: str, param: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError("--values", "comma-separated numbers like 600,1800,3600", text) from None
    if not values or any(v < 0 or not math.isfinite(v) for v in values):
        raise SpecError("--values", "one or more numbers >= 0", text)
    if param in ("spares", "gpus") and any(v != int(v) for v in values):
        raise SpecError("--values", f"whole numbers for {param}", text)
    return values


def with_param(sc: Scenario, param: str, value: float) -> Scenario:
    """The scenario with `param` set to `value` (validated again)."""
    data: dict[str, Any] = sc.model_dump(exclude_none=True)
    if param == "checkpoint_interval":
        if value <= 0:
            raise SpecError("--values", "checkpoint intervals > 0 seconds", value)
        data["checkpoint"].update(policy="fixed", interval_s=value)
    elif param == "spares":
        data["recovery"]["spares"] = int(value)
    elif param == "gpus" and len(sc.jobs) > 1:  # several jobs: the cluster's size
        _drop_dp(data)
        cluster = load_sized_cluster(sc.cluster, None)
        if value < 1 or int(value) % cluster.gpus_per_node:
            raise SpecError("--values", f"cluster sizes that are multiples of gpus_per_node ({cluster.gpus_per_node})", value)
        data["cluster_gpus"] = int(value)
    elif param == "gpus":
        gpus = int(value)
        job = data["jobs"][0]
        cluster = load_sized_cluster(sc.cluster, sc.cluster_gpus)
        old = job.get("gpus") or cluster.gpus
        if sc.recovery.spares == "auto":  # keep the share of idle nodes the scenario had
            nodes = math.ceil(gpus * cluster.gpus / old / cluster.gpus_per_node)
            data["cluster_gpus"] = max(nodes * cluster.gpus_per_node, gpus)
        elif sc.recovery.spares == "p99":  # room for the largest pool P99 sizing could ask for
            data["cluster_gpus"] = gpus + max(cluster.gpus - old, gpus // 8)
        else:
            data["cluster_gpus"] = gpus + int(sc.recovery.spares) * cluster.gpus_per_node
        job["gpus"] = gpus
        _drop_dp(data)
    else:
        raise SpecError("--param", f"one of {', '.join(PARAMS)}", param)
    return parse_scenario(data, f"sweep {param}={value:g}")


def _drop_dp(data: dict) -> None:
    """A size sweep re-derives dp from each size: drop a stated dp from the jobs' layouts."""
    for job in data["jobs"]:
        if job.get("layout"):
            job["layout"] = ",".join(kv for kv in job["layout"].split(",") if kv.split("=")[0].strip() != "dp")


def sweep_multi(sc: Scenario, param: str, values: list[float], runs: int | None = None, seed: int | None = None) -> dict:
    """A sweep of a multi-job scenario (through the scheduler); `gpus` is the cluster's size."""
    from wanka.sim.multijob import simulate_cluster  # noqa: PLC0415

    rows = []
    for v in values:
        out = simulate_cluster(with_param(sc, param, v), runs=runs, seed=seed)
        rows.append({
            "value": int(v) if v == int(v) else v,
            "cluster_goodput": out["cluster_goodput"],
            "ettr_job_weighted": out["ettr_job_weighted"],
            "ettr_gpu_hour_weighted": out["ettr_gpu_hour_weighted"],
            "job_interruptions": out["job_interruptions"],
            "jobs_finished": sum(j["finished"]["mean"] or 0.0 for j in out["jobs"]),
            "jobs": {j["name"]: {"ettr": j["ettr"]["mean"], "completion_h": j["completion_h"]["mean"]} for j in out["jobs"]},
        })
    return {"scenario": sc.name, "mode": "multi-job", "param": param, "values": values, "rows": rows}


def sweep(sc: Scenario, param: str, values: list[float], runs: int | None = None, seed: int | None = None) -> dict:
    if len(sc.jobs) > 1:
        return sweep_multi(sc, param, values, runs, seed)
    rows = []
    for v in values:
        out = simulate(compile_scenario(with_param(sc, param, v)), runs=runs, seed=seed)
        rows.append({
            "value": int(v) if v == int(v) else v,
            "ettr": out["ettr"],
            "goodput": out["goodput"],
            "unexpected": out["interruptions"]["unexpected"],
            "mttf_h": out["mttf_h"],
            "checkpoint_interval_s": out["checkpoint"]["interval_s"],
            "lost_gpu_hours": {k: s["mean"] for k, s in out["lost_gpu_hours"].items()},
            "gpus": out["job"]["gpus"],
            "spares": out["spares"]["pool_nodes"],
        })
    return {"scenario": sc.name, "param": param, "values": values, "rows": rows}
