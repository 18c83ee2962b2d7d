"""Load a spec given as a preset name or a YAML/JSON file path.

Specs are plain mappings; each layer validates its own kind (ClusterSpec, ModelSpec, ...).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from wanka.errors import SpecError


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """Parse a YAML or JSON file into a dict; any problem is a one-line SpecError."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(what, "a readable file", str(path), source=str(path)) from exc
    except UnicodeDecodeError:
        raise SpecError(what, "a UTF-8 text file (YAML or JSON), not binary data", source=str(path)) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
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
