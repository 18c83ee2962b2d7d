"""Reliability: failure taxonomy and rates, checkpoint interval policies, telemetry and prediction.

    from wanka.reliability import load_failure_model, daly_interval
    fm = load_failure_model("llama3-h100")
    fm.mtbf_h(16384, 8)             # 3.09 h
    daly_interval(300, 6 * 3600)    # 3402.6 s = 56.7 min
"""

from wanka.reliability.checkpoint import (CheckpointSchedule, daly_exact_interval, daly_interval, daly_wall_time,
                                          interval_for, young_interval)
from wanka.reliability.failures import Cause, FailureModel, build_failure_model, failure_model_names, load_failure_model

__all__ = ["Cause", "CheckpointSchedule", "FailureModel", "build_failure_model", "daly_exact_interval",
           "daly_interval", "daly_wall_time", "failure_model_names", "interval_for", "load_failure_model",
           "young_interval"]
