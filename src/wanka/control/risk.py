"""The reliability layer's telemetry failure predictor (wanka.reliability.predictor), scoring live nodes.

The predictor is trained once per service on the synthetic fleet of wanka.reliability.telemetry
(failure mix `llama3-h100`, 300 nodes x 96 h, horizon 24 h, seed 0); its probability that a node
fails within 24 h is stored as the node's `predicted_risk`, and the `node_risk` rule acts on the
larger of it and a reported risk. The features are the predictor's own (telemetry.FEATURES), computed
from a node's stored series on hourly buckets, as the training data are hourly:

- temp_excess_C: the node's hottest GPU (mean over the newest hour) minus the fleet's median of the
  same; with fewer than 3 nodes reporting GPUs there is no fleet, and the baseline is the training
  fleet's 60 C under load (telemetry.py [G], an assumption).
- temp_trend_C: that temperature minus the same 6 h earlier; 0 until 6 h of history exist.
- power_dev_W: the largest |GPU power - fleet median GPU power| in the newest hour (0 without GPUs).
  Assumes every GPU of a node runs the same job: an idle GPU beside busy ones would look deviant.
- ecc_6h, ecc_24h, xid_6h: growth of the agent's ECC-corrected and XID counters over 6 h / 24 h,
  summed over GPUs (counters are cumulative; a reset counts as 0).
- volt_drop_mV, flaps_6h: 0 - NVML exposes no core voltage and the agent reads no link flaps.

Only GPU signals enter: the predictor was trained on GPU telemetry, and a CPU's temperature under
load says nothing about it, so a CPU-only node scores from zeros (low risk).
Samples before the node's `health_since` (its last undrain) are ignored: a repaired node starts anew.
"""

from __future__ import annotations

import re
import statistics
import threading
import time

import numpy as np

from wanka.control.store import Store
from wanka.control.telemetry_store import TelemetryStore
from wanka.reliability.telemetry import FEATURES

HOUR_S = 3600.0
TRAINING_BASELINE_TEMP_C = 60.0  # telemetry.generate: healthy GPUs ~60 C under load [G]
MIN_FLEET = 3  # nodes reporting GPUs before the fleet median replaces the training baseline (assumption)
_GPU = re.compile(r"^gpu(\d+)_(temp_C|power_W|ecc_corrected_total|xid_total)$")


def _gpu_series(series: dict) -> dict[str, dict[int, list[tuple[float, float]]]]:
    out: dict[str, dict[int, list]] = {}
    for name, points in series.items():
        m = _GPU.match(name)
        if m:
            out.setdefault(m.group(2), {})[int(m.group(1))] = points
    return out


def _mean_in(points, lo: float, hi: float) -> float | None:
    vals = [v for ts, v in points if lo <= ts < hi]
    return sum(vals) / len(vals) if vals else None


def _growth(points, since: float) -> float:
    vals = [v for ts, v in points if ts >= since]
    return sum(max(0.0, b - a) for a, b in zip(vals, vals[1:]))  # a counter reset adds nothing


def node_signals(series: dict, now: float) -> dict:
    """What one node contributes: hottest GPU now and 6 h ago, per-GPU power now, counter growth."""
    g = _gpu_series(series)
    hot_now = [t for p in g.get("temp_C", {}).values() if (t := _mean_in(p, now - HOUR_S, now + 1)) is not None]
    hot_then = [t for p in g.get("temp_C", {}).values() if (t := _mean_in(p, now - 7 * HOUR_S, now - 6 * HOUR_S)) is not None]
    power = [w for p in g.get("power_W", {}).values() if (w := _mean_in(p, now - HOUR_S, now + 1)) is not None]
    return {"temp_now": max(hot_now) if hot_now else None, "temp_6h_ago": max(hot_then) if hot_then else None,
            "power": power,
            "ecc_6h": sum(_growth(p, now - 6 * HOUR_S) for p in g.get("ecc_corrected_total", {}).values()),
            "ecc_24h": sum(_growth(p, now - 24 * HOUR_S) for p in g.get("ecc_corrected_total", {}).values()),
            "xid_6h": sum(_growth(p, now - 6 * HOUR_S) for p in g.get("xid_total", {}).values())}


def features(signals: dict, fleet: list[dict]) -> dict[str, float]:
    """telemetry.FEATURES of one node, given every node's signals (the fleet, itself included)."""
    temps = [f["temp_now"] for f in fleet if f["temp_now"] is not None]
    base_temp = statistics.median(temps) if len(temps) >= MIN_FLEET else TRAINING_BASELINE_TEMP_C
    powers = [w for f in fleet for w in f["power"]]
    t = signals["temp_now"]
    return {
        "temp_excess_C": 0.0 if t is None else t - base_temp,
        "temp_trend_C": 0.0 if t is None or signals["temp_6h_ago"] is None else t - signals["temp_6h_ago"],
        "power_dev_W": max((abs(w - statistics.median(powers)) for w in signals["power"]), default=0.0),
        "volt_drop_mV": 0.0, "ecc_6h": signals["ecc_6h"], "ecc_24h": signals["ecc_24h"],
        "xid_6h": signals["xid_6h"], "flaps_6h": 0.0,
    }


class TelemetryPredictor:
    """The trained classifier; `risk(features)` is its probability of a failure within 24 h."""

    def __init__(self, failure_mix: str = "llama3-h100", seed: int = 0):
        from wanka.reliability.failures import load_failure_model
        from wanka.reliability.predictor import train
        from wanka.reliability.telemetry import generate

        self.clf, self.calibrated_threshold = train(generate(load_failure_model(failure_mix), 300, 96, seed=seed),
                                                    horizon_h=24, target_precision=0.8, seed=seed)

    def risk(self, feats: dict[str, float]) -> float:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return float(self.clf.predict_proba(np.array([[feats[k] for k in FEATURES]]))[0, 1])


class NodeScorer:
    """Scores every node with telemetry each `every_s` and writes `predicted_risk` and its features."""

    def __init__(self, store: Store, telemetry: TelemetryStore, every_s: float, retention_s: float,
                 predictor: TelemetryPredictor | None = None):
        self.store, self.telemetry, self.every_s, self.retention_s = store, telemetry, every_s, retention_s
        self.predictor = predictor

    def score_once(self, now: float | None = None) -> dict[str, float]:
        now = now or time.time()
        self.telemetry.prune(self.retention_s, now)
        nodes = {n["name"]: n for n in self.store.nodes()}
        signals = {}
        for name, node in nodes.items():
            since = max(now - 25 * HOUR_S, node["health_since"] or 0.0)
            series = self.telemetry.series(name, since)
            if series:
                signals[name] = node_signals(series, now)
        if not signals:
            return {}
        if self.predictor is None:
            self.predictor = TelemetryPredictor()
        out = {}
        for name, sig in signals.items():
            feats = features(sig, list(signals.values()))
            out[name] = risk = self.predictor.risk(feats)
            detail = ", ".join(f"{k}={v:.1f}" for k, v in feats.items() if v)
            self.telemetry.set_predicted_risk(name, risk, detail or "all features 0", nodes[name]["health_since"])
        return out

    def run(self, stop: threading.Event) -> None:
        import sys
        import traceback

        while not stop.is_set():
            try:
                self.score_once()
            except Exception:  # a lost DB connection must not end scoring; say it and go on
                sys.stderr.write("wanka control: telemetry scoring failed:\n" + traceback.format_exc())
            stop.wait(self.every_s)
