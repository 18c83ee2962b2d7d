"""User-facing errors: one line that names the field and what was expected.

The CLI turns a `SpecError` into exit code 2 and that one line on stderr; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Any


class SpecError(ValueError):
    """Bad user input: a spec file, a preset name, a CLI flag, a checkpoint on disk."""

    def __init__(self, field: str, expected: str, got: Any = None, *, source: str | None = None):
        self.field, self.expected, self.got, self.source = field, expected, got, source
        where = f"{source}: " if source else ""
        tail = "" if got is None else f", got {_short(got)}"
        super().__init__(f"{where}{field}: expected {expected}{tail}")


_UNION_TAG = re.compile(r"^(function-.*|str|int|float|bool|none|dict\[.*\]|list\[.*\]|tuple\[.*\]|literal\[.*\])$")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def from_pydantic(exc: Exception, *, source: str | None = None, prefix: str = "") -> SpecError:
    """Convert a pydantic ValidationError into a SpecError naming the first bad field."""
    first = exc.errors()[0]  # type: ignore[attr-defined]
    loc = ""
    for part in first.get("loc", ()):
        if isinstance(part, int):
            loc += f"[{part}]"  # list items read jobs[0].gpus
        elif not _UNION_TAG.match(str(part)):  # pydantic names the union member it tried
            loc += f".{part}" if loc else str(part)
    field = f"{prefix}{loc}" if loc else (prefix.rstrip(".") or "spec")
    kind = first.get("type", "")
    msg = first.get("msg", "valid value")
    if kind == "missing":
        return SpecError(field, "a value (field is required)", source=source)
    if kind == "extra_forbidden":
        return SpecError(field, "a known field (this key is unknown; check its spelling)", source=source)
    msg = msg.removeprefix("Value error, ").removeprefix("Input should be ")
    # Validators across several fields write "FIELD: expected ..." so the line names the field.
    named = re.match(r"^([\w.\[\]]+): expected (.*)$", msg)
    if named:
        inner = f"{field}.{named.group(1)}" if loc else f"{prefix}{named.group(1)}"
        return SpecError(inner, named.group(2), source=source)
    return SpecError(field, msg, first.get("input"), source=source)
