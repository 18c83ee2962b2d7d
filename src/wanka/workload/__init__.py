"""Workload layer: what a dense or MoE transformer costs (docs/workload.md)."""

from wanka.workload.spec import MoESpec, ModelSpec, load_model, model_names, parse_model_spec

__all__ = ["MoESpec", "ModelSpec", "load_model", "model_names", "parse_model_spec"]
