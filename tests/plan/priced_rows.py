"""Signed errors of the built-in rows a predicate picks, priced as `wanka plan validate` prices them."""

from __future__ import annotations

from wanka.plan.row_check import check_row


def priced_errors(rows, pred) -> list[float]:
    """predicted / measured - 1 of every row with pred(row) that the planner could price."""
    return [c.error for c in (check_row(r) for r in rows if pred(r)) if not c.skipped]
