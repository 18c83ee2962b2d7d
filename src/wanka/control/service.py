"""`wanka control up`: open (and migrate) the DB, register this machine as the `local` node, re-adopt
running jobs, then serve the API while the supervisor thread ticks.

The first start on an empty DB mints an admin token and writes it to STATE_DIR/admin.token (mode
0600); clients read it from there, or from --token / $WANKA_TOKEN.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from wanka.errors import SpecError


def admin_token_path(state_dir: Path) -> Path:
    return state_dir / "admin.token"


def serve(db_url: str | None, host: str, port: int, slots: int, state_dir: Path, rules_path: str | None,
          poll_s: float = 0.5, backend_name: str = "local", partition: str | None = None,
          cluster: str | None = None, agent_period_s: float = 10.0, telemetry_retention_h: float = 48.0,
          k8s: dict | None = None) -> None:
    """`k8s`: the --k8s-* options (image, namespace, volume, mount_path) of `--backend k8s`."""
    import uvicorn

    from wanka.control.api import create_app
    from wanka.control.backend import make_backend
    from wanka.control.db import default_db_url, open_db
    from wanka.control.rules import load_rules
    from wanka.control.store import Store
    from wanka.control.supervisor import Supervisor

    if not 0 < port < 65536:
        raise SpecError("port", "an integer in 1..65535", port)
    if slots < 1:
        raise SpecError("slots", "an integer >= 1 (ranks this node runs at once)", slots)
    if poll_s <= 0:
        raise SpecError("poll", "seconds > 0", poll_s)
    if partition is not None and backend_name != "slurm":
        raise SpecError("partition", "only with --backend slurm", partition)
    for key, value in (k8s or {}).items():
        if value is not None and backend_name != "k8s":
            raise SpecError(f"k8s-{key.replace('_', '-')}", "only with --backend k8s", value)
    if agent_period_s < 0:
        raise SpecError("agent-period", "seconds >= 0 (0: no in-process agent)", agent_period_s)
    if telemetry_retention_h < 25:  # the predictor reads 24 h of counter growth (risk.py)
        raise SpecError("telemetry-retention-h", "hours >= 25", telemetry_retention_h)
    if cluster is not None:
        from wanka.control.throughput import load_node_cluster

        load_node_cluster(cluster)
    rules = load_rules(rules_path)
    options = {"slurm": {"partition": partition}, "k8s": k8s or {}}.get(backend_name, {})
    backend = make_backend(backend_name, **options)
    inventory = backend.nodes() or [("local", slots)]  # None: this machine
    if len({n for _, n in inventory}) > 1:
        raise SpecError("backend", f"{backend_name}: nodes of one size (slots per node: {dict(inventory)})")
    state_dir.mkdir(parents=True, exist_ok=True)
    _, sessions = open_db(db_url or default_db_url(state_dir))
    store = Store(sessions)
    check_backend_matches(store, backend_name, [name for name, _ in inventory])
    for name, n in inventory:
        store.ensure_node(name, n)
    if not store.has_tokens():
        token = store.add_token("admin", "admin")
        path = admin_token_path(state_dir)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        sys.stderr.write(f"wanka control: admin token written to {path}\n")
    supervisor = Supervisor(store, rules, backend, cluster_source=cluster)
    adopted = supervisor.recover()
    sys.stderr.write(f"wanka control: re-adopted {len(adopted)} running job(s)\n")
    stop = threading.Event()
    thread = threading.Thread(target=supervisor.run, args=(stop, poll_s), name="supervisor", daemon=True)
    thread.start()
    local_agent_s = agent_period_s if backend_name == "local" else 0.0  # elsewhere `wanka control agent` runs on each node
    threads = [thread, *start_telemetry(store, rules, stop, local_agent_s, telemetry_retention_h * 3600.0)]
    app = create_app(store, supervisor)
    sys.stderr.write(f"wanka control: {backend_name} backend, nodes {', '.join(n for n, _ in inventory)}\n")
    sys.stderr.write(f"wanka control: serving on http://{host}:{port}\n")
    sys.stderr.flush()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def check_backend_matches(store, backend_name: str, node_names: list[str]) -> None:
    """A state DB belongs to one backend: its nodes are that backend's, and its running jobs were
    launched by it (another backend could neither watch nor stop them)."""
    foreign_nodes = [n["name"] for n in store.nodes() if n["name"] not in node_names]
    if foreign_nodes:
        raise SpecError("backend", f"{backend_name}: a state DB without other nodes (it has {', '.join(foreign_nodes)}; "
                        "use another --state-dir/--db)")
    for job in store.active_jobs():
        if job["backend"] not in (None, backend_name):
            raise SpecError("backend", f"{job['backend']}: the backend that launched running job {job['id']}")


def start_telemetry(store, rules, stop: threading.Event, agent_period_s: float, retention_s: float) -> list[threading.Thread]:
    """The in-process agent for the `local` node (writing to the DB directly) and the risk scorer."""
    from wanka.control.agent import Agent
    from wanka.control.risk import NodeScorer
    from wanka.control.telemetry_store import TelemetryStore, check_samples

    telemetry = TelemetryStore(store.sessions)
    threads = [threading.Thread(target=NodeScorer(store, telemetry, rules.node_risk.score_every_s, retention_s).run,
                                args=(stop,), name="risk-scorer", daemon=True)]
    if agent_period_s > 0:
        agent = Agent(lambda samples: telemetry.add("local", check_samples(samples, time.time())), agent_period_s,
                      on_error=lambda exc: sys.stderr.write(f"wanka control: local agent: {exc}\n"))
        threads.append(threading.Thread(target=agent.run, args=(stop,), name="local-agent", daemon=True))
    for t in threads:
        t.start()
    return threads
