"""A failure predictor trained on synthetic telemetry, scored on held-out simulated days.

Model: scikit-learn HistGradientBoostingClassifier on hourly node features (telemetry.FEATURES),
label = "this node fails within the next `horizon_h` hours". The alarm threshold is picked on the
training days as the lowest score that keeps training precision >= `target_precision`.

Scoring is per event, as a drain policy would act: a node's first alarm drains it. The alarm is a
true positive if the node fails within `horizon_h` after it (lead time = failure - alarm), a false
alarm otherwise. Recall counts failures preceded by an alarm. Precision depends on the base rate,
and training data are accelerated, so we also report false alarms per node-day, which does not; the
twin turns that into its own false-drain rate at the real failure rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from threadpoolctl import threadpool_limits

from wanka.reliability.failures import FailureModel
from wanka.reliability.telemetry import Telemetry, generate, labelled


@dataclass(frozen=True)
class PredictorReport:
    precision: float
    recall: float  # of all failures
    recall_with_precursor: float  # of failures that had a precursor (the twin's `recall`)
    lead_time_h_median: float
    false_alarms_per_node_day: float
    failures: int
    alarms: int
    threshold: float

    def to_dict(self) -> dict:
        return asdict(self)


def _subset(tel: Telemetry, idx: np.ndarray) -> Telemetry:
    return Telemetry(tel.features[idx], tel.fail_hour[idx], tel.has_precursor[idx], tel.lead_h[idx], tel.cause[idx])


def train(tel: Telemetry, horizon_h: int = 24, target_precision: float = 0.8, seed: int = 0):
    """Fit on half the nodes; pick the lowest alarm threshold whose event-level precision on the other
    half reaches `target_precision` (none reaching it: threshold inf, i.e. never alarm)."""
    half = np.arange(tel.nodes) % 2 == 0
    fit, cal = _subset(tel, np.nonzero(half)[0]), _subset(tel, np.nonzero(~half)[0])
    X, y, mask = labelled(fit, horizon_h)
    clf = HistGradientBoostingClassifier(max_iter=80, learning_rate=0.1, max_leaf_nodes=15, random_state=seed)
    with threadpool_limits(1):  # OpenMP threads fight over a shared machine; one is faster here
        clf.fit(X[mask], y[mask])
        scores = _scores(clf, cal)
    for thr in np.unique(np.quantile(scores, np.linspace(0.90, 0.9999, 60))):
        r = _events(scores, thr, cal, horizon_h)
        if r.precision >= target_precision and r.alarms >= 2:
            return clf, float(thr)
    return clf, float("inf")  # no threshold is precise enough: the policy never drains on this model


def _scores(clf, tel: Telemetry) -> np.ndarray:
    X = tel.features
    return clf.predict_proba(X.reshape(-1, X.shape[2]))[:, 1].reshape(X.shape[:2])


def evaluate(clf, threshold: float, tel: Telemetry, horizon_h: int = 24) -> PredictorReport:
    with threadpool_limits(1):
        scores = _scores(clf, tel)
    return _events(scores, threshold, tel, horizon_h)


def _events(scores: np.ndarray, threshold: float, tel: Telemetry, horizon_h: int) -> PredictorReport:
    _, _, mask = labelled(tel, horizon_h)
    alarm = (scores >= threshold) & mask
    first = np.where(alarm.any(axis=1), alarm.argmax(axis=1), -1)
    fh = tel.fail_hour
    has_alarm = first >= 0
    tp = has_alarm & (fh >= 0) & (fh > first) & (fh - first <= horizon_h)
    fp = has_alarm & ~tp
    failures = int((fh >= 0).sum())
    pre = int(tel.has_precursor.sum())
    leads = (fh - first)[tp]
    exposure_days = float(mask.sum()) / 24.0  # healthy node-days watched
    return PredictorReport(
        precision=float(tp.sum() / max(1, has_alarm.sum())),
        recall=float(tp.sum() / max(1, failures)),
        recall_with_precursor=float((tp & tel.has_precursor).sum() / max(1, pre)),
        lead_time_h_median=float(np.median(leads)) if leads.size else 0.0,
        false_alarms_per_node_day=float(fp.sum() / max(exposure_days, 1e-9)),
        failures=failures, alarms=int(has_alarm.sum()), threshold=float(threshold))


def train_and_evaluate(model: FailureModel, nodes: int = 300, hours: int = 96, horizon_h: int = 24,
                       target_precision: float = 0.8, seed: int = 0) -> PredictorReport:
    """Train on simulated days (seed), report on other held-out simulated days (seed + 1)."""
    clf, threshold = train(generate(model, nodes, hours, seed=seed), horizon_h, target_precision, seed)
    return evaluate(clf, threshold, generate(model, nodes, hours, seed=seed + 1), horizon_h)


def twin_prediction(report: PredictorReport, drain_s: float = 120.0) -> dict:
    """PredictionSpec fields for a scenario from a measured report."""
    return {"enabled": True, "recall": report.recall_with_precursor, "precision": max(report.precision, 1e-3),
            "lead_s": report.lead_time_h_median * 3600.0, "drain_s": drain_s,
            "false_alarms_per_node_day": report.false_alarms_per_node_day}
