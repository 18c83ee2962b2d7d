"""`/metrics` in the Prometheus text format, computed from the DB at scrape time (the gauges the
alerting rules in rules.py read)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from wanka.control.db import JOB_STATES
from wanka.control.supervisor import node_risk
from wanka.control.telemetry_store import TelemetryStore
from wanka.control.watch import progress, straggler_events


def render_metrics(store, supervisor) -> str:
    reg = CollectorRegistry()
    by_state = Gauge("wanka_control_jobs", "jobs by state", ["state"], registry=reg)
    jobs = store.jobs()
    for state in JOB_STATES:
        by_state.labels(state).set(sum(j["state"] == state for j in jobs))
    since = Gauge("wanka_control_job_seconds_since_step", "seconds since the job's last training step", ["job_id"], registry=reg)
    median = Gauge("wanka_control_job_median_step_seconds", "median step time of the job's last 50 steps", ["job_id"], registry=reg)
    step = Gauge("wanka_control_job_step", "the job's last step", ["job_id"], registry=reg)
    restarts = Gauge("wanka_control_job_restarts", "launches made by a recovery action", ["job_id"], registry=reg)
    tps = Gauge("wanka_control_job_tokens_per_s", "the job's tokens/s at its last step", ["job_id"], registry=reg)
    predicted = Gauge("wanka_control_job_predicted_tokens_per_s", "the planner's tokens/s for the job", ["job_id"], registry=reg)
    stragglers = Gauge("wanka_control_job_straggler_events", "the trainer's straggler events in the job's current launch",
                       ["job_id"], registry=reg)
    now = time.time()
    for j in jobs:
        restarts.labels(str(j["id"])).set(j["restarts"])
        if j["predicted_tokens_per_s"] is not None:
            predicted.labels(str(j["id"])).set(j["predicted_tokens_per_s"])
        if j["state"] != "running":
            continue
        stragglers.labels(str(j["id"])).set(sum(e.get("time", 0) >= (j["proc_start"] or now) for e in straggler_events(j["ckpt"])))
        p = progress(j["ckpt"])
        if p.tokens_per_s is not None:
            tps.labels(str(j["id"])).set(p.tokens_per_s)
        if p.last_step_at is not None:
            since.labels(str(j["id"])).set(now - p.last_step_at)
        if p.median_step_s is not None:
            median.labels(str(j["id"])).set(p.median_step_s)
        if p.last_step is not None:
            step.labels(str(j["id"])).set(p.last_step)
    drained = Gauge("wanka_control_node_drained", "1 when the node is drained", ["node"], registry=reg)
    risk = Gauge("wanka_control_node_risk", "the node's failure risk the node_risk rule acts on (max of reported "
                 "and predicted)", ["node"], registry=reg)
    predicted_risk = Gauge("wanka_control_node_predicted_risk", "the telemetry predictor's risk", ["node"], registry=reg)
    for n in store.nodes():
        drained.labels(n["name"]).set(n["state"] == "drained")
        if n["risk"] is not None or n["predicted_risk"] is not None:
            risk.labels(n["name"]).set(node_risk(n))
        if n["predicted_risk"] is not None:
            predicted_risk.labels(n["name"]).set(n["predicted_risk"])
    latest = Gauge("wanka_node_telemetry", "a node agent's newest sample of each metric (agent.py)", ["node", "metric"],
                   registry=reg)
    for node, metrics in TelemetryStore(store.sessions).latest().items():
        for metric, (_, value) in metrics.items():
            latest.labels(node, metric).set(value)
    for name, help_text in (("rank_exits", "launches that exited before their last step"), ("hangs", "hangs detected"),
                            ("launches", "launches started"), ("loss_spikes", "trainer loss-spike rollbacks seen"), ("adopted", "launches re-adopted after a service restart"),
                            ("stragglers", "straggler rule detections"), ("throughput_alerts", "throughput rule alerts")):
        c = Counter(f"wanka_control_{name}", help_text, registry=reg)
        c.inc(supervisor.counters[name])
    return generate_latest(reg).decode()
