"""`/metrics` in the Prometheus text format, computed from the DB at scrape time (the gauges the
alerting rules in rules.py read)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from wanka.control.db import JOB_STATES
from wanka.control.watch import progress


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
    now = time.time()
    for j in jobs:
        restarts.labels(str(j["id"])).set(j["restarts"])
        if j["state"] != "running":
            continue
        p = progress(j["ckpt"])
        if p.last_step_at is not None:
            since.labels(str(j["id"])).set(now - p.last_step_at)
        if p.median_step_s is not None:
            median.labels(str(j["id"])).set(p.median_step_s)
        if p.last_step is not None:
            step.labels(str(j["id"])).set(p.last_step)
    drained = Gauge("wanka_control_node_drained", "1 when the node is drained", ["node"], registry=reg)
    risk = Gauge("wanka_control_node_risk", "the node's failure risk as last reported", ["node"], registry=reg)
    for n in store.nodes():
        drained.labels(n["name"]).set(n["state"] == "drained")
        if n["risk"] is not None:
            risk.labels(n["name"]).set(n["risk"])
    for name, help_text in (("rank_exits", "launches that exited before their last step"), ("hangs", "hangs detected"),
                            ("launches", "launches started"), ("loss_spikes", "trainer loss-spike rollbacks seen"), ("adopted", "launches re-adopted after a service restart")):
        c = Counter(f"wanka_control_{name}", help_text, registry=reg)
        c.inc(supervisor.counters[name])
    return generate_latest(reg).decode()
