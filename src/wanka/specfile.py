"""Load a spec given as a preset name or a YAML/JSON file path.

Specs are plain mappings; each layer validates its own kind (ClusterSpec, ModelSpec, ...).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from wanka.errors import SpecError


MAX_EXACT_INT = 2**53


class StrictSpec(BaseModel):
    """Base of every spec model: unknown keys, NaN/inf, true/false for a number and integers beyond
    2**53 are refused.

    pydantic's lax mode would read `layers: true` as 1 and `bandwidth_Gbps: .inf` as infinity; a spec
    file that says either is a mistake, not a value. Integers above 2**53 are not exact as floats
    (IEEE 754 binary64 has a 53-bit significand), and the models compute in floats.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_numbers(cls, value, info: ValidationInfo):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INT:
            raise ValueError(f"an integer of at most 2**53 in size, got {value:.3g}")
        if isinstance(value, bool):
            annotation = str(cls.model_fields[info.field_name].annotation)
            if "bool" not in annotation and ("int" in annotation or "float" in annotation):
                raise ValueError(f"a number, not {str(value).lower()}")
        return value


# Nesting deeper than this is refused before the parser recurses (Python's default recursion limit
# is 1,000 frames; real specs nest 3-4 levels).
MAX_DEPTH = 64


class AliasRefused(yaml.YAMLError):
    pass


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without YAML aliases: `*name` re-uses a node, and nested re-use expands
    exponentially in whatever walks the result (a "billion laughs" bomb: 9 levels of 9 aliases
    are 387 million strings). wanka specs never need aliases, so any alias is refused at once."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise AliasRefused(f"alias *{self.peek_event().anchor}")
        return super().compose_node(parent, index)


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of flow-style YAML or JSON (an upper bound for block style)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """Parse a YAML or JSON file into a dict; any problem is a one-line SpecError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(what, "a readable file", str(path), source=str(path)) from exc
    except UnicodeDecodeError:
        raise SpecError(what, "a UTF-8 text file (YAML or JSON), not binary data", source=str(path)) from None
    if _nesting_depth(text) > MAX_DEPTH:
        raise SpecError(what, f"YAML or JSON nested at most {MAX_DEPTH} levels deep", source=str(path))
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506
    except AliasRefused as exc:
        raise SpecError(what, "YAML without anchors and aliases (&name / *name are not accepted)", str(exc),
                        source=str(path)) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        at = f" (line {line + 1})" if line is not None else ""
        raise SpecError(what, f"valid YAML or JSON{at}", source=str(path)) from exc
    if not isinstance(data, dict):
        raise SpecError(what, "a mapping of fields at the top level", type(data).__name__, source=str(path))
    return data


def preset_names(package: str) -> list[str]:
    """Names of the YAML presets shipped in `package`/presets."""
    root = resources.files(package) / "presets"
    return sorted(p.name.rsplit(".", 1)[0] for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))


def load_spec(name_or_path: str, package: str, what: str) -> tuple[dict[str, Any], str]:
    """Return (mapping, source) for a preset name in `package`/presets or a file path."""
    if "\x00" in name_or_path:  # e.g. a JSON "\u0000" escape; every path operation raises on NUL
        raise SpecError(what, "a preset name or a spec file path without NUL characters", name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise SpecError(what, "an existing spec file or a preset name", name_or_path)
        return read_mapping(path, what), str(path)
    names = preset_names(package)
    if name_or_path not in names:
        raise SpecError(what, f"a preset name ({', '.join(names)}) or a spec file", name_or_path)
    res = resources.files(package) / "presets" / f"{name_or_path}.yaml"
    return yaml.safe_load(res.read_text()), f"preset {name_or_path}"
