"""Planner: price any parallel layout of any transformer on any cluster, find the best (docs/plan.md)."""

from wanka.plan.estimate import Estimate, estimate
from wanka.plan.exposure import Options

__all__ = ["Estimate", "Options", "estimate"]
from wanka.plan.search import SearchStats, search  # noqa: E402
from wanka.plan.whole_run import whole_run  # noqa: E402

__all__ += ["SearchStats", "search", "whole_run"]
