"""`wanka control up|submit|list|show|cancel|logs|drain|undrain|token|rules` (docs/control.md).

    wanka control up --port 8470 &                    # SQLite in runs/control/state.db
    wanka control submit --model tiny --layout dp=2 --steps 20 --ckpt runs/ctl/a
    wanka control list
    wanka control show 1 --json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console

from wanka.cli import json_flag, needs_subcommand
from wanka.errors import SpecError

DEFAULT_URL = "http://127.0.0.1:8470"
DEFAULT_STATE = "runs/control"


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("control", help="the operations plane: a service that runs, watches and recovers jobs")
    csub = c.add_subparsers(dest="control_command", metavar="{up,agent,submit,list,show,cancel,logs,drain,undrain,token,rules}")
    c.set_defaults(func=needs_subcommand("up, agent, submit, list, show, cancel, logs, drain, undrain, token, rules",
                                         "wanka control up"))

    up = csub.add_parser("up", help="run the service (API + supervisor) in the foreground")
    up.add_argument("--db", help="database URL (default sqlite:///STATE_DIR/state.db; postgresql+psycopg://... for production)")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8470)
    up.add_argument("--slots", type=int, default=os.cpu_count() or 1,
                    help="ranks the local node runs at once (--backend local; slurm reads its nodes from sinfo)")
    up.add_argument("--state-dir", default=DEFAULT_STATE, help="where the SQLite DB and admin.token live")
    up.add_argument("--rules", help="rules YAML (default: the shipped rules.yaml)")
    up.add_argument("--poll", type=float, default=0.5, help="seconds between supervisor passes")
    up.add_argument("--backend", default="local", help="local | slurm | k8s: where launches run (docs/control.md)")
    up.add_argument("--partition", help="slurm: the partition whose nodes wanka schedules on (default: all)")
    up.add_argument("--k8s-image", help="k8s: the container image the pods run (wanka installed at the service's paths)")
    up.add_argument("--k8s-namespace", help="k8s: the namespace of the JobSets (default: default)")
    up.add_argument("--k8s-volume", help="k8s: the PersistentVolumeClaim holding the checkpoint dirs")
    up.add_argument("--k8s-mount-path", help="k8s: where pods mount --k8s-volume; this service must see the same "
                    "filesystem there (default /shared)")
    up.add_argument("--cluster", help="this node's hardware as a cluster preset or spec file: the planner's "
                    "predicted tokens/s for each job (throughput rule)")
    up.add_argument("--agent-period", type=float, default=10.0, help="seconds between the in-process agent's "
                    "samples of this node (0: none)")
    up.add_argument("--telemetry-retention-h", type=float, default=48.0, help="hours of telemetry kept")
    up.set_defaults(func=cmd_up)

    def client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--url", default=os.environ.get("WANKA_CONTROL_URL", DEFAULT_URL))
        p.add_argument("--token", default=os.environ.get("WANKA_TOKEN"), help="bearer token (default $WANKA_TOKEN, "
                       "else STATE_DIR/admin.token)")
        p.add_argument("--state-dir", default=DEFAULT_STATE)
        json_flag(p)
        return p

    ag = client(csub.add_parser("agent", help="sample a node's health (psutil, NVML) and post it to the service"))
    ag.add_argument("--node", required=True, help="the node's name in the service's inventory")
    ag.add_argument("--period", type=float, default=10.0, help="seconds between samples")
    ag.add_argument("--count", type=int, help="stop after this many samples (default: run until stopped)")
    ag.set_defaults(func=cmd_agent)

    s = client(csub.add_parser("submit", help="queue a training job"))
    s.add_argument("--model", default="tiny")
    s.add_argument("--layout", default="")
    s.add_argument("--nproc", type=int, help="ranks (default: the product of the layout's degrees)")
    s.add_argument("--steps", type=int, required=True)
    s.add_argument("--ckpt", required=True, help="checkpoint + metrics directory")
    s.add_argument("--priority", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--seq-len", type=int)
    s.add_argument("--ckpt-every", type=int, default=5)
    s.add_argument("--lr", type=float, default=3e-3)
    s.add_argument("--data", help="prepared shards dir (default: the shipped corpus)")
    s.add_argument("--inject", action="append", default=[], help="fault injection KIND@step=N[,rank=R] (testing)")
    s.add_argument("--collective-timeout", type=float, default=600.0)
    s.set_defaults(func=cmd_submit)

    client(csub.add_parser("list", help="jobs (yours; all for an admin)")).set_defaults(func=cmd_list)
    for name, helptext, func in (("show", "one job with its audit log", cmd_show), ("cancel", "cancel a job", cmd_cancel)):
        p = client(csub.add_parser(name, help=helptext))
        p.add_argument("job_id", type=int)
        p.set_defaults(func=func)
    lg = client(csub.add_parser("logs", help="a launch's log (default the newest attempt)"))
    lg.add_argument("job_id", type=int)
    lg.add_argument("--attempt", type=int)
    lg.set_defaults(func=cmd_logs)
    for name in ("drain", "undrain"):
        p = client(csub.add_parser(name, help=f"{name} a node (admin)"))
        p.add_argument("node")
        p.set_defaults(func=cmd_node, action=name)
    t = client(csub.add_parser("token", help="mint a bearer token (admin)"))
    t.add_argument("--user", required=True)
    t.add_argument("--role", default="user", choices=["user", "admin"])
    t.set_defaults(func=cmd_token)
    r = csub.add_parser("rules", help="validate a rules file; --prometheus prints Prometheus alerting rules for it")
    r.add_argument("--rules", help="rules YAML (default: the shipped rules.yaml)")
    r.add_argument("--prometheus", action="store_true")
    json_flag(r)
    r.set_defaults(func=cmd_rules)


def cmd_up(args):
    from wanka.control.service import serve

    serve(args.db, args.host, args.port, args.slots, Path(args.state_dir), args.rules, args.poll,
          backend_name=args.backend, partition=args.partition, cluster=args.cluster,
          agent_period_s=args.agent_period, telemetry_retention_h=args.telemetry_retention_h,
          k8s={"image": args.k8s_image, "namespace": args.k8s_namespace, "volume": args.k8s_volume,
               "mount_path": args.k8s_mount_path})
    return 0


def cmd_agent(args):
    import threading

    from wanka.control.agent import Agent

    if args.period <= 0:
        raise SpecError("period", "seconds > 0", args.period)
    if args.count is not None and args.count < 1:
        raise SpecError("count", "an integer >= 1", args.count)
    sent = []
    agent = Agent(lambda samples: sent.append(_call(args, "POST", f"/v1/nodes/{args.node}/telemetry", {"samples": samples})),
                  args.period, on_error=lambda exc: sys.stderr.write(f"wanka control agent: {exc}\n"))
    if args.count is None:
        agent.run(threading.Event())  # until interrupted; a failing post ends it with its one-line error
    for i in range(args.count or 0):
        agent.once()
        if i + 1 < args.count:
            time.sleep(args.period)
    out = {"node": args.node, "samples": agent.sent, "stored": sum(r["stored"] for r in sent)}
    return out, lambda con: con.print(f"node {args.node}: {agent.sent} sample(s) posted, {out['stored']} values stored")


def _call(args, method: str, path: str, body: dict | None = None, params: dict | None = None):
    import httpx

    token = args.token
    if not token:
        from wanka.control.service import admin_token_path

        tf = admin_token_path(Path(args.state_dir))
        if not tf.is_file():
            raise SpecError("token", f"--token, $WANKA_TOKEN, or {tf} (written by `wanka control up`)")
        token = tf.read_text().strip()
    try:
        r = httpx.request(method, args.url.rstrip("/") + path, json=body, params=params, timeout=60,
                          headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise SpecError("url", f"a running `wanka control up` at {args.url}", type(exc).__name__) from None
    if r.status_code >= 400:
        try:
            data = r.json()
        except ValueError:
            data = {"detail": r.text}
        detail = data.get("detail", r.text)
        field = data.get("field") or {401: "token", 403: "token", 404: "job_id"}.get(r.status_code, "request")
        raise RemoteError(field, r.status_code, str(detail))
    return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text


class RemoteError(SpecError):
    """The service refused a request: one line with its HTTP status and its own 'FIELD: expected ...'."""

    def __init__(self, field: str, status: int, detail: str):
        super().__init__(field, detail)
        self.args = (f"HTTP {status}: {detail}",)

    def __str__(self) -> str:
        return self.args[0]


def cmd_submit(args):
    body = {"model": args.model, "layout": args.layout, "nproc": args.nproc, "steps": args.steps,
            "ckpt": str(Path(args.ckpt).resolve()), "priority": args.priority, "seed": args.seed,
            "seq_len": args.seq_len, "ckpt_every": args.ckpt_every, "lr": args.lr,
            "data": str(Path(args.data).resolve()) if args.data else None, "inject": args.inject,
            "collective_timeout": args.collective_timeout}
    job = _call(args, "POST", "/v1/jobs", body)
    return job, lambda con: con.print(f"job {job['id']} queued: {job['model']} {job['layout'] or '-'} x{job['nproc']}, "
                                      f"{job['steps']} steps -> {job['ckpt']}")


def cmd_list(args):
    jobs = _call(args, "GET", "/v1/jobs")

    def render(con: Console) -> None:
        from rich.table import Table

        t = Table("id", "owner", "state", "model", "layout", "ranks", "steps", "attempt", "restarts", "node")
        for j in jobs:
            t.add_row(*(str(j[k] if j[k] is not None else "-") for k in
                        ("id", "owner", "state", "model", "layout", "nproc", "steps", "attempt", "restarts", "node")))
        con.print(t)

    return {"jobs": jobs}, render


def cmd_show(args):
    job = _call(args, "GET", f"/v1/jobs/{args.job_id}")

    def render(con: Console) -> None:
        con.print(f"job {job['id']} ({job['owner']}): {job['state']}, attempt {job['attempt']}, restarts {job['restarts']}")
        if job.get("result"):
            con.print(f"params_sha256 {job['result'].get('params_sha256')}  final loss {job['result'].get('final_loss')}")
        for a in job["audit"]:
            con.print(f"  [{a['rule']}] {a['detection']} -> {a['decision']}: {a['action']} ({a['reason']})", markup=False)

    return job, render


def cmd_cancel(args):
    job = _call(args, "POST", f"/v1/jobs/{args.job_id}/cancel")
    return job, lambda con: con.print(f"job {job['id']}: cancel requested (state {job['state']})")


def cmd_logs(args):
    text = _call(args, "GET", f"/v1/jobs/{args.job_id}/logs", params={"attempt": args.attempt} if args.attempt else None)
    return {"job_id": args.job_id, "log": text}, lambda con: con.print(text, markup=False, highlight=False, end="")


def cmd_node(args):
    node = _call(args, "POST", f"/v1/nodes/{args.node}/{args.action}")
    return node, lambda con: con.print(f"node {node['name']}: {node['state']}")


def cmd_token(args):
    out = _call(args, "POST", "/v1/tokens", {"user": args.user, "role": args.role})
    return out, lambda con: con.print(out["token"])


def cmd_rules(args):
    from wanka.control.rules import load_rules, prometheus_rules

    rules = load_rules(args.rules)
    text = prometheus_rules(rules) if args.prometheus else None
    payload = {"rules": rules.model_dump(), "prometheus": text}
    return payload, lambda con: con.print(text if text else "rules OK", markup=False, highlight=False, end="" if text else "\n")
