"""The REST API (FastAPI): jobs, nodes, tokens, audit, and `/metrics` for Prometheus.

Auth: `Authorization: Bearer TOKEN`; tokens are stored as SHA-256 hashes with a user and a role.
A `user` sees and cancels only their own jobs (another user's job answers 404, as if absent); an
`admin` sees all jobs, drains and undrains nodes, and mints tokens. Bad requests answer 422 with
`{"field": ..., "detail": "FIELD: expected ..."}`; nothing is written for a rejected request.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from wanka.control.local_backend import log_path
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor
from wanka.control.telemetry_store import TelemetryStore, check_samples
from wanka.errors import SpecError, from_pydantic


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str
    role: str = "user"


class RiskReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    risk: float = Field(ge=0.0, le=1.0)


def create_app(store: Store, supervisor: Supervisor) -> FastAPI:
    app = FastAPI(title="wanka control", version="1")
    telemetry = TelemetryStore(store.sessions)

    @app.exception_handler(SpecError)
    async def _spec_error(request: Request, exc: SpecError):
        return JSONResponse(status_code=422, content={"field": exc.field, "detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        for e in errors:  # the body's location prefix is not a field the user wrote
            e["loc"] = tuple(p for p in e.get("loc", ()) if p != "body") or ("body",)
        spec_error = from_pydantic(_Errors(errors))
        return JSONResponse(status_code=422, content={"field": spec_error.field, "detail": str(spec_error)})

    def caller(request: Request) -> tuple[str, str]:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HTTPException(401, "authorization: expected 'Bearer TOKEN'", headers={"WWW-Authenticate": "Bearer"})
        who = store.who(token.strip())
        if who is None:
            raise HTTPException(401, "authorization: unknown token", headers={"WWW-Authenticate": "Bearer"})
        return who

    def admin(who: tuple[str, str] = Depends(caller)) -> tuple[str, str]:
        if who[1] != "admin":
            raise HTTPException(403, "role: expected admin")
        return who

    def own_job(job_id: int, who: tuple[str, str]) -> dict:
        job = store.job(job_id)
        if job is None or (who[1] != "admin" and job["owner"] != who[0]):
            raise HTTPException(404, f"job_id: no job {job_id} of yours")
        return job

    @app.get("/healthz")
    def healthz() -> dict:
        return {"ok": True, "time": time.time()}

    @app.post("/v1/jobs", status_code=201)
    def submit(body: dict[str, Any], who: tuple[str, str] = Depends(caller)) -> dict:
        from wanka.control.spec import parse_job_spec

        spec = parse_job_spec(body)
        if spec.nproc > supervisor.capacity:
            raise SpecError("nproc", f"at most the inventory's {supervisor.capacity} slots", spec.nproc)
        return store.submit(spec, owner=who[0], predicted_tokens_per_s=supervisor.predict_tokens_per_s(spec))

    @app.get("/v1/jobs")
    def jobs(who: tuple[str, str] = Depends(caller)) -> list[dict]:
        return store.jobs(owner=None if who[1] == "admin" else who[0])

    @app.get("/v1/jobs/{job_id}")
    def show(job_id: int, who: tuple[str, str] = Depends(caller)) -> dict:
        return {**own_job(job_id, who), "audit": store.audit_log(job_id)}

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel(job_id: int, who: tuple[str, str] = Depends(caller)) -> dict:
        own_job(job_id, who)
        return store.request_cancel(job_id)

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def logs(job_id: int, attempt: int | None = None, tail_bytes: int = 65536,
             who: tuple[str, str] = Depends(caller)) -> str:
        job = own_job(job_id, who)
        n = job["attempt"] if attempt is None else attempt
        if not 1 <= n <= max(1, job["attempt"]):
            raise SpecError("attempt", f"an attempt in 1..{job['attempt']}", attempt)
        if not 1 <= tail_bytes <= 16 * 2**20:
            raise SpecError("tail_bytes", "an integer in 1..16777216", tail_bytes)
        path: Path = log_path(job["ckpt"], n)
        if not path.is_file():
            return ""
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - tail_bytes))
            return f.read().decode(errors="replace")

    @app.get("/v1/nodes")
    def nodes(who: tuple[str, str] = Depends(caller)) -> list[dict]:
        return store.nodes()

    @app.post("/v1/nodes/{name}/drain")
    def drain(name: str, who: tuple[str, str] = Depends(admin)) -> dict:
        return store.set_node(name, state="drained")

    @app.post("/v1/nodes/{name}/undrain")
    def undrain(name: str, who: tuple[str, str] = Depends(admin)) -> dict:
        # a repaired node starts with no risk on record, and its telemetry history starts now (risk.py)
        return store.set_node(name, state="up", risk=None, predicted_risk=None, risk_detail=None, health_since=time.time())

    @app.post("/v1/nodes/{name}/risk")
    def report_risk(name: str, body: RiskReport, who: tuple[str, str] = Depends(admin)) -> dict:
        """A telemetry agent reports the node's failure risk; the supervisor's node_risk rule acts on it."""
        return store.set_node(name, risk=body.risk)

    @app.post("/v1/nodes/{name}/telemetry", status_code=201)
    def add_telemetry(name: str, body: dict[str, Any], who: tuple[str, str] = Depends(admin)) -> dict:
        """A node agent's samples: {"samples": [{"ts": EPOCH_S, "metrics": {NAME: VALUE}}]} (agent.py)."""
        if set(body) != {"samples"}:
            raise SpecError("samples", "a body {\"samples\": [...]} and nothing else", sorted(body))
        return {"node": name, "stored": telemetry.add(name, check_samples(body["samples"], time.time()))}

    @app.get("/v1/nodes/{name}/telemetry")
    def get_telemetry(name: str, since: float = 0.0, who: tuple[str, str] = Depends(caller)) -> dict:
        if name not in {n["name"] for n in store.nodes()}:
            raise HTTPException(404, f"node: no node {name}")
        return {"node": name, "series": telemetry.series(name, since)}

    @app.post("/v1/tokens", status_code=201)
    def add_token(body: TokenRequest, who: tuple[str, str] = Depends(admin)) -> dict:
        return {"user": body.user, "role": body.role, "token": store.add_token(body.user, body.role)}

    @app.get("/v1/audit")
    def audit(who: tuple[str, str] = Depends(caller)) -> list[dict]:
        rows = store.audit_log()
        if who[1] == "admin":
            return rows
        mine = {j["id"] for j in store.jobs(owner=who[0])}
        return [r for r in rows if r["job_id"] in mine]

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        from wanka.control.metrics import render_metrics

        return render_metrics(store, supervisor)

    from wanka.control.dashboard import add_dashboard

    add_dashboard(app, store, caller, own_job)
    return app


class _Errors:
    """Adapts FastAPI's error list to what wanka.errors.from_pydantic reads."""

    def __init__(self, errors: list[dict]):
        self._errors = errors

    def errors(self) -> list[dict]:
        return self._errors
