"""The dashboard: one page (static files in `control/static/`, no CDN, charts drawn as SVG by the
page itself) and the JSON it reads.

    GET /  and  /dashboard          the page (no data in it; it asks for a token and keeps it in
                                    sessionStorage, sent as `Authorization: Bearer`, never in a URL)
    GET /v1/dashboard               nodes (state, risk, utilisation), the caller's jobs, the audit timeline
    GET /v1/jobs/{id}/metrics       the job's step series from the trainer's metrics.jsonl and the
                                    planner's predicted tokens/s

A user sees only their own jobs and their audit rows (as in api.py); node utilisation counts every
job's ranks, without naming them.
"""

from __future__ import annotations

import json
import math
from collections import deque
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Callable

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, Response

from wanka.control.store import Store
from wanka.errors import SpecError

SERIES_KEYS = ("step", "loss", "tokens_per_s", "step_time_s", "lr")
MAX_POINTS = 10_000     # at most this many steps per metrics answer: bounded work per request
TIMELINE_ROWS = 200     # the newest audit rows the timeline shows
_STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


def _static(name: str) -> str:
    return resources.files("wanka.control").joinpath("static", name).read_text()


def read_series(ckpt: str, limit: int = MAX_POINTS) -> list[dict]:
    """The last `limit` step records of the trainer's metrics.jsonl (rank 0, one line per step), only
    the keys the charts draw. A line being written (half a JSON document) is skipped."""
    points: deque[dict] = deque(maxlen=limit)
    try:
        with open(Path(ckpt) / "metrics.jsonl") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                points.append({k: _json_number(rec.get(k)) for k in SERIES_KEYS})
    except OSError:
        return []
    return list(points)


def _json_number(value):
    """JSON has no NaN or infinity (the trainer's json.dumps writes them; a strict encoder refuses
    them): a non-finite number travels as its name, "nan" / "inf" / "-inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@lru_cache(maxsize=256)
def _planned(model: str, layout: str, nproc: int, seq_len: int | None, gpu: str, slots: int) -> float:
    from wanka.cluster.model import Cluster
    from wanka.cluster.spec import parse_cluster_spec
    from wanka.layout import Layout
    from wanka.plan import estimate
    from wanka.workload.spec import load_model

    per_node = min(slots, nproc)
    cluster = Cluster(parse_cluster_spec({"name": "job-nodes", "gpu": gpu, "gpus": nproc, "gpus_per_node": per_node,
                                          "scale_up": {"domain": per_node}}))
    spec = load_model(model, **({"seq_len": seq_len} if seq_len else {}))
    return estimate(spec, cluster, Layout.parse(layout), seq_len=seq_len).tokens_per_s


def predicted_tokens_per_s(job: dict, node: dict | None) -> dict:
    """The planner's tokens/s for the job: the job's stored prediction if it has one, else
    `wanka.plan.estimate` of its model and layout on its node's accelerator (a catalog name in the
    node's `gpu`), else none: the `local` node runs CPU ranks, which the hardware catalog does not price."""
    stored = job.get("predicted_tokens_per_s")
    if stored is not None:
        return {"tokens_per_s": stored, "source": "job record"}
    gpu = (node or {}).get("gpu")
    if not gpu:
        where = f"node {node['name']!r}" if node else "no node yet"
        return {"tokens_per_s": None, "source": f"no prediction: {where} names no accelerator from the hardware catalog"}
    try:
        value = _planned(job["model"], job["layout"], job["nproc"], (job.get("train_args") or {}).get("seq_len"),
                         gpu, node["slots"])
    except SpecError as exc:
        return {"tokens_per_s": None, "source": f"no prediction: {exc}"}
    return {"tokens_per_s": value, "source": f"wanka.plan on {job['nproc']} x {gpu}"}


def node_heat(nodes: list[dict], jobs: list[dict]) -> list[dict]:
    """Each node with `used_slots` (ranks of its launching/running jobs) and `utilisation` in 0..1."""
    used: dict[str, int] = {}
    for j in jobs:
        if j["state"] in ("launching", "running") and j["node"]:
            used[j["node"]] = used.get(j["node"], 0) + j["nproc"]
    return [{**n, "used_slots": used.get(n["name"], 0), "utilisation": min(1.0, used.get(n["name"], 0) / n["slots"])}
            for n in nodes]


def add_dashboard(app: FastAPI, store: Store, caller: Callable, own_job: Callable) -> None:
    """Register the page and its JSON on `app`; `caller` and `own_job` are api.py's auth checks."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    @app.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return _static("dashboard.html")

    @app.get("/dashboard/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in _STATIC:
            raise SpecError("name", " | ".join(_STATIC), name)
        return Response(_static(name), media_type=_STATIC[name])

    @app.get("/v1/dashboard")
    def overview(who: tuple[str, str] = Depends(caller)) -> dict:
        every_job = store.jobs()
        mine = every_job if who[1] == "admin" else [j for j in every_job if j["owner"] == who[0]]
        ids = {j["id"] for j in mine}
        audit = [r for r in store.audit_log() if who[1] == "admin" or r["job_id"] in ids][-TIMELINE_ROWS:]
        return {"user": who[0], "role": who[1], "nodes": node_heat(store.nodes(), every_job), "jobs": mine,
                "audit": audit}

    @app.get("/v1/jobs/{job_id}/metrics")
    def job_metrics(job_id: int, limit: int = MAX_POINTS, who: tuple[str, str] = Depends(caller)) -> dict:
        if not 1 <= limit <= MAX_POINTS:
            raise SpecError("limit", f"an integer in 1..{MAX_POINTS}", limit)
        job = own_job(job_id, who)
        node = next((n for n in store.nodes() if n["name"] == job["node"]), None)
        return {"job_id": job_id, "points": read_series(job["ckpt"], limit),
                "predicted": predicted_tokens_per_s(job, node)}
