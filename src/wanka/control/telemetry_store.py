"""The telemetry time series: one row per (node, ts, metric, value), written by node agents, read by
the risk scorer (risk.py) and `/metrics`, pruned after the retention period."""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict

from sqlalchemy import delete, func, select
from sqlalchemy.orm import sessionmaker

from wanka.control.db import NodeRow, TelemetryRow
from wanka.errors import SpecError

METRIC_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # also a valid Prometheus label value and easy to read
MAX_SAMPLES = 10_000  # per request: a bounded write; an agent posts one sample per period
FUTURE_SLACK_S = 300.0  # a sample stamped more than this ahead of the service's clock is refused


def check_samples(samples: list[dict], now: float) -> list[tuple[float, str, float]]:
    """[{ts, metrics: {name: value}}] -> (ts, metric, value) rows; SpecError names the first bad field."""
    if not isinstance(samples, list) or not 1 <= len(samples) <= MAX_SAMPLES:
        raise SpecError("samples", f"a list of 1..{MAX_SAMPLES} samples", type(samples).__name__)
    rows = []
    for i, s in enumerate(samples):
        if not isinstance(s, dict) or set(s) - {"ts", "metrics"} or "metrics" not in s:
            raise SpecError(f"samples.{i}", "an object {ts, metrics}", s)
        ts = s.get("ts", now)
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not 0 < ts <= now + FUTURE_SLACK_S:
            raise SpecError(f"samples.{i}.ts", "seconds since the epoch, not in the future", ts)
        if not isinstance(s["metrics"], dict) or not s["metrics"]:
            raise SpecError(f"samples.{i}.metrics", "a non-empty mapping of metric name to number", s["metrics"])
        for name, value in s["metrics"].items():
            if not isinstance(name, str) or not METRIC_NAME.match(name):
                raise SpecError(f"samples.{i}.metrics", "names of a letter, then letters, digits and '_' (at most 64)", name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise SpecError(f"samples.{i}.metrics.{name}", "a finite number", value)
            rows.append((float(ts), name, float(value)))
    return rows


class TelemetryStore:
    def __init__(self, sessions: sessionmaker):
        self.sessions = sessions

    def add(self, node: str, rows: list[tuple[float, str, float]]) -> int:
        with self.sessions.begin() as s:
            if s.get(NodeRow, node) is None:
                raise SpecError("node", "a known node name", node)
            s.add_all(TelemetryRow(node=node, ts=ts, metric=m, value=v) for ts, m, v in rows)
        return len(rows)

    def series(self, node: str, since: float) -> dict[str, list[tuple[float, float]]]:
        """metric -> [(ts, value)] oldest first, for samples at or after `since`."""
        q = (select(TelemetryRow.metric, TelemetryRow.ts, TelemetryRow.value)
             .where(TelemetryRow.node == node, TelemetryRow.ts >= since).order_by(TelemetryRow.ts))
        out: dict[str, list[tuple[float, float]]] = defaultdict(list)
        with self.sessions() as s:
            for metric, ts, value in s.execute(q):
                out[metric].append((ts, value))
        return dict(out)

    def latest(self) -> dict[str, dict[str, tuple[float, float]]]:
        """node -> metric -> (ts, value) of its newest sample."""
        newest = (select(TelemetryRow.node, TelemetryRow.metric, func.max(TelemetryRow.ts).label("ts"))
                  .group_by(TelemetryRow.node, TelemetryRow.metric).subquery())
        q = select(TelemetryRow.node, TelemetryRow.metric, TelemetryRow.ts, TelemetryRow.value).join(
            newest, (TelemetryRow.node == newest.c.node) & (TelemetryRow.metric == newest.c.metric)
            & (TelemetryRow.ts == newest.c.ts))
        out: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
        with self.sessions() as s:
            for node, metric, ts, value in s.execute(q):
                out[node][metric] = (ts, value)
        return dict(out)

    def set_predicted_risk(self, node: str, risk: float, detail: str, health_since: float | None) -> bool:
        """Write the predictor's risk unless the node was undrained since its series were read."""
        with self.sessions.begin() as s:
            row = s.get(NodeRow, node, with_for_update=True)
            if row is None or row.health_since != health_since:
                return False
            row.predicted_risk, row.risk_detail, row.updated_at = risk, detail, time.time()
            return True

    def count(self, node: str | None = None) -> int:
        q = select(func.count()).select_from(TelemetryRow)
        if node is not None:
            q = q.where(TelemetryRow.node == node)
        with self.sessions() as s:
            return s.scalar(q)

    def prune(self, retention_s: float, now: float | None = None) -> int:
        """Delete samples older than the retention period; returns how many."""
        cutoff = (now or time.time()) - retention_s
        with self.sessions.begin() as s:
            return s.execute(delete(TelemetryRow).where(TelemetryRow.ts < cutoff)).rowcount
