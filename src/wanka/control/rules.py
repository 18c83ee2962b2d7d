"""The declarative rules file (rules.yaml, validated) and the Prometheus alerting rules for the same rules.

    wanka control rules --prometheus > wanka-alerts.yaml   # for Prometheus' rule_files

The service evaluates the rules itself (supervisor.py) and exports the gauges the alert expressions
read (`/metrics`, api.py), so an operator's Prometheus fires on the same conditions the service acts on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wanka.errors import SpecError, from_pydantic

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeadRankRule(_Strict):
    action: Literal["restart", "fail"] = "restart"
    max_restarts: int = Field(default=3, ge=0)


class HangRule(_Strict):
    factor: float = Field(default=20.0, gt=1)
    min_s: float = Field(default=60.0, gt=0)
    startup_grace_s: float = Field(default=600.0, gt=0)
    action: Literal["kill_restart", "alert"] = "kill_restart"


class LossSpikeRule(_Strict):
    max_rollbacks: int = Field(default=3, ge=1)
    lr_factor: float = Field(default=0.5, gt=0, lt=1)


class NodeRiskRule(_Strict):
    threshold: float = Field(default=0.5, gt=0, lt=1)
    score_every_s: float = Field(default=15.0, gt=0)  # how often the telemetry predictor scores the nodes (risk.py)


class StragglerRule(_Strict):
    min_events: int = Field(default=3, ge=1)  # the trainer's straggler events in one launch before acting
    action: Literal["alert", "restart"] = "alert"


class ThroughputRule(_Strict):
    below_pct: float = Field(default=50.0, gt=0, lt=100)  # measured < (1 - below_pct/100) x predicted
    min_steps: int = Field(default=5, ge=1)  # steps of a launch measured before judging (median of these)
    action: Literal["alert"] = "alert"


class Rules(_Strict):
    dead_rank: DeadRankRule = DeadRankRule()
    hang: HangRule = HangRule()
    loss_spike: LossSpikeRule = LossSpikeRule()
    node_risk: NodeRiskRule = NodeRiskRule()
    straggler: StragglerRule = StragglerRule()
    throughput: ThroughputRule = ThroughputRule()


def load_rules(path: str | Path | None = None) -> Rules:
    path = Path(path) if path else DEFAULT_RULES
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SpecError("rules", "a readable YAML file", f"{path} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise SpecError("rules", "valid YAML", f"{path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise SpecError("rules", "a mapping of rule names (dead_rank, hang, loss_spike, node_risk, straggler, throughput)", type(data).__name__, source=str(path))
    try:
        return Rules(**data)
    except ValidationError as exc:
        raise from_pydantic(exc, source=str(path)) from None


def prometheus_rules(rules: Rules) -> str:
    """Prometheus alerting rules (rule_files format) over the gauges `/metrics` exports."""
    h = rules.hang
    groups = {"groups": [{"name": "wanka-control", "rules": [
        {"alert": "WankaRankDead",
         "expr": "increase(wanka_control_rank_exits_total[5m]) > 0",
         "labels": {"severity": "warning", "action": rules.dead_rank.action},
         "annotations": {"summary": "a training launch exited before its last step"}},
        {"alert": "WankaJobHang",
         "expr": (f"wanka_control_job_seconds_since_step > {h.factor} * wanka_control_job_median_step_seconds "
                  f"and wanka_control_job_seconds_since_step > {h.min_s}"),
         "labels": {"severity": "critical", "action": h.action},
         "annotations": {"summary": "job {{ $labels.job_id }} made no step for {{ $value }} s"}},
        {"alert": "WankaLossSpikes",
         "expr": f"increase(wanka_control_loss_spikes_total[1h]) >= {rules.loss_spike.max_rollbacks}",
         "labels": {"severity": "warning", "action": "restart_lower_lr"},
         "annotations": {"summary": "trainers rolled back {{ $value }} loss spikes in the last hour"}},
        {"alert": "WankaNodeRisk",
         "expr": f"wanka_control_node_risk > {rules.node_risk.threshold}",
         "labels": {"severity": "critical", "action": "drain_migrate"},
         "annotations": {"summary": "node {{ $labels.node }} failure risk {{ $value }}"}},
        {"alert": "WankaStraggler",
         "expr": f"wanka_control_job_straggler_events >= {rules.straggler.min_events}",
         "labels": {"severity": "warning", "action": rules.straggler.action},
         "annotations": {"summary": "job {{ $labels.job_id }}: {{ $value }} straggler events in this launch"}},
        {"alert": "WankaThroughputBelowPlan",
         "expr": (f"wanka_control_job_tokens_per_s < {1 - rules.throughput.below_pct / 100:g} * "
                  "wanka_control_job_predicted_tokens_per_s"),
         "labels": {"severity": "warning", "action": rules.throughput.action},
         "annotations": {"summary": "job {{ $labels.job_id }} runs at {{ $value }} tokens/s, below the planner's "
                                    "prediction"}},
        {"alert": "WankaJobRestartsExhausted",
         "expr": f"wanka_control_job_restarts >= {rules.dead_rank.max_restarts}",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "job {{ $labels.job_id }} used all its restarts"}},
    ]}]}
    return yaml.safe_dump(groups, sort_keys=False)
