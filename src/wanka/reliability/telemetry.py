"""Synthetic per-GPU health telemetry with failure precursors, aggregated to hourly node features.

Signals per GPU and hour: temperature (C), power (W), core voltage (V), ECC corrected-error count,
Xid-like events; per node: link flaps. Healthy baselines are [G] (plausible H100 values: ~60 C and
~600 W under load, 0.9 V core); ambient drift is diurnal (+-1.5 C; Llama 3 section 3.3.4 notes a
1-2% diurnal throughput swing from temperature) and must not look like a failure.

A failure's cause is drawn from a FailureModel's mix. With probability `precursor_share` (per cause,
taxonomy.yaml) the failure shows a precursor that ramps up over `lead_h` hours before it, in the
signals its component drives (Acme: overheating precedes NVLink/ECC errors [Q]; Meta's lemon nodes:
xid counts [Q]; HPN: link flapping [P]). Others fail with no warning (Lablup: only 2/10 XID failures
were visible early [A]). Rates are accelerated for training data; precision at a real base rate is
recomputed from false alarms per node-day (see predictor.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wanka.reliability.failures import FailureModel

GPUS_PER_NODE = 8
# which signals a component's precursor drives
PRECURSOR_SIGNALS = {
    "gpu": ("xid", "temp", "power"), "hbm": ("ecc",), "sram": ("ecc", "xid"), "gsp": ("xid",),
    "nic": ("flaps",), "network": ("flaps",), "host": ("volt", "xid"), "node": ("ecc", "xid", "flaps", "temp"),
    "unknown": ("xid",), "software": (),
}
FEATURES = ("temp_excess_C", "temp_trend_C", "power_dev_W", "volt_drop_mV", "ecc_6h", "ecc_24h", "xid_6h", "flaps_6h")


@dataclass(frozen=True)
class Telemetry:
    features: np.ndarray  # (nodes, hours, len(FEATURES))
    fail_hour: np.ndarray  # (nodes,) hour of failure, or -1
    has_precursor: np.ndarray  # (nodes,) bool
    lead_h: np.ndarray  # (nodes,) precursor lead time in hours (0 if none)
    cause: np.ndarray  # (nodes,) cause index, or -1

    @property
    def nodes(self) -> int:
        return self.features.shape[0]

    @property
    def hours(self) -> int:
        return self.features.shape[1]


def _window_sum(x: np.ndarray, w: int) -> np.ndarray:
    """Sum over the last w hours (inclusive) along axis 1."""
    c = np.cumsum(x, axis=1)
    out = c.copy()
    out[:, w:] = c[:, w:] - c[:, :-w]
    return out


def generate(model: FailureModel, nodes: int = 300, hours: int = 96, fail_prob: float = 0.25,
             lead_h: tuple[float, float] = (2.0, 24.0), seed: int = 0) -> Telemetry:
    """Telemetry for `nodes` nodes over `hours`; each node fails in the window with `fail_prob`."""
    rng = np.random.default_rng(seed)
    g = GPUS_PER_NODE
    t = np.arange(hours)
    # healthy baselines
    node_offset = rng.normal(0.0, 2.0, (nodes, 1, 1))  # cooling position (Titan: placement matters) [A]
    temp = 60.0 + node_offset + 1.5 * np.sin(2 * np.pi * t / 24.0)[None, :, None] + rng.normal(0, 1.0, (nodes, hours, g))
    power = 600.0 + 4.0 * (temp - 60.0) + rng.normal(0, 15.0, (nodes, hours, g))
    volt = 0.90 + rng.normal(0, 0.004, (nodes, hours, g))
    ecc = rng.poisson(0.05, (nodes, hours, g)).astype(float)
    xid = rng.poisson(0.003, (nodes, hours, g)).astype(float)
    flaps = rng.poisson(0.02, (nodes, hours)).astype(float)
    # failures and their precursors
    rates = model.rates_per_hour(g, g)
    fails = rng.random(nodes) < fail_prob
    fail_hour = np.where(fails, rng.integers(int(lead_h[1]), hours, nodes), -1)
    cause = np.where(fails, rng.choice(len(rates), nodes, p=rates / rates.sum()), -1)
    share = np.array([c.precursor_share for c in model.causes])
    pre = fails & (rng.random(nodes) < np.where(cause >= 0, share[np.maximum(cause, 0)], 0.0))
    lead = np.where(pre, rng.uniform(lead_h[0], lead_h[1], nodes), 0.0)
    for n in np.nonzero(pre)[0]:
        f, gpu_i = fail_hour[n], rng.integers(g)
        ramp = np.clip((t - (f - lead[n])) / max(lead[n], 1e-9), 0.0, 1.0) * (t < f)
        for sig in PRECURSOR_SIGNALS.get(model.causes[cause[n]].component, ("xid",)):
            if sig == "temp":
                temp[n, :, gpu_i] += 12.0 * ramp
            elif sig == "power":
                power[n, :, gpu_i] -= 80.0 * ramp * rng.random(hours)
            elif sig == "volt":
                volt[n, :, gpu_i] -= 0.03 * ramp
            elif sig == "ecc":
                ecc[n, :, gpu_i] += rng.poisson(3.0 * ramp)
            elif sig == "xid":
                xid[n, :, gpu_i] += rng.poisson(0.4 * ramp)
            elif sig == "flaps":
                flaps[n] += rng.poisson(1.5 * ramp)
    # hourly node features: peer comparison (Minder-style similarity) and short/long windows
    tmax = temp.max(axis=2)
    fleet = np.median(tmax, axis=0, keepdims=True)
    feats = np.stack([
        tmax - fleet,
        tmax - np.concatenate([tmax[:, :1].repeat(6, axis=1), tmax[:, :-6]], axis=1),
        np.abs(power - np.median(power, axis=(0, 2), keepdims=True)).max(axis=2),
        (0.90 - volt.min(axis=2)) * 1000.0,
        _window_sum(ecc.sum(axis=2), 6),
        _window_sum(ecc.sum(axis=2), 24),
        _window_sum(xid.sum(axis=2), 6),
        _window_sum(flaps, 6),
    ], axis=2)
    return Telemetry(feats, fail_hour, pre, lead, cause)


def labelled(tel: Telemetry, horizon_h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, mask): y = the node fails within the next `horizon_h` hours; hours after a failure masked."""
    hours = np.arange(tel.hours)[None, :]
    fh = tel.fail_hour[:, None]
    failed = fh >= 0
    y = failed & (hours < fh) & (hours >= fh - horizon_h)
    mask = ~failed | (hours < fh)
    return tel.features, y, mask
