"""Model FLOPs for MFU (the formula lives in wanka.workload.flops; docs/plan.md states it)."""

from wanka.workload.flops import model_flops_per_token, token_flops

__all__ = ["model_flops_per_token", "token_flops"]
