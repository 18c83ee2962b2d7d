"""Printing results: exactly one JSON document with --json, a readable rendering otherwise."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

from rich import box
from rich.console import Console
from rich.table import Table

Render = Callable[[Console], None]


def check_report_path(path: str) -> Path:
    """A report's target: a file (new or existing, not a directory) in an existing directory. Commands
    call this before their (slow) run, so that a bad path costs nothing and leaves nothing behind."""
    from wanka.errors import SpecError  # noqa: PLC0415

    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise SpecError("--report", "a file path in an existing directory", path)
    return target


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null; numpy scalars become Python numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return _clean(value.item())
    return value


def dumps(payload: Any) -> str:
    return json.dumps(_clean(payload), indent=2, allow_nan=False)


def emit(payload: Any, render: Render | None, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(dumps(payload) + "\n")
    elif render is not None:
        render(console())
    else:
        sys.stdout.write(dumps(payload) + "\n")


def console() -> Console:
    """A console for human output: the terminal's width, or 160 columns when piped to a file."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    """A rich table: numeric columns right-aligned, text columns left-aligned."""
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, col in enumerate(columns):
        values = [row[i] for row in rows if i < len(row) and row[i] is not None]
        numeric = bool(values) and all(isinstance(v, (int, float)) for v in values)
        t.add_column(col, justify="right" if numeric else "left", no_wrap=True)
    for row in rows:
        t.add_row(*[fmt(v) for v in row])
    return t


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3g}"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
