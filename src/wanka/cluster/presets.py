"""Cluster presets (YAML files in presets/) and spec files, turned into `Cluster`s."""

from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path

import numpy as np

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.errors import SpecError
from wanka.specfile import load_spec, preset_names

DEFAULT_CLUSTER = "wanka-10k"


def cluster_names() -> list[str]:
    return preset_names("wanka.cluster")


def load_cluster(name_or_path: str = DEFAULT_CLUSTER, **overrides) -> Cluster:
    """A preset name or a YAML/JSON spec file -> Cluster. `overrides` replace top-level fields."""
    data, source = load_spec(name_or_path, "wanka.cluster", "cluster")
    data = {**data, **overrides}
    spec = parse_cluster_spec(data, source)
    tree = None
    if spec.scale_out.topology == "explicit":
        base = Path(name_or_path).parent if Path(name_or_path).is_file() else None
        tree, nodes = load_tree(spec.scale_out.tree_csv, spec.scale_out.tree_columns, base)
        if nodes * spec.gpus_per_node != spec.gpus:
            raise SpecError("gpus", f"{nodes} hosts x {spec.gpus_per_node} = {nodes * spec.gpus_per_node} "
                            f"(the hosts in {spec.scale_out.tree_csv})", spec.gpus, source=source)
    try:
        return Cluster(spec, tree)
    except SpecError as exc:
        if exc.source is None:
            raise SpecError(exc.field, exc.expected, exc.got, source=source) from None
        raise


def load_tree(csv_name: str, columns: list[str], base: Path | None) -> tuple[np.ndarray, int]:
    """Read a host -> switch table (one row per host; `columns` leaf first) into group ids.

    A switch is keyed by its whole path to the root, since names may repeat under different parents
    (the Alibaba Lingjun topology reuses ASW names across PSWs). Hosts are ordered by that path so
    that hosts under one leaf are contiguous node ids.
    """
    path = (base / csv_name) if base is not None and (base / csv_name).exists() else None
    if path is None:
        res = resources.files("wanka.cluster") / "presets" / csv_name
        if not res.is_file():
            raise SpecError("scale_out.tree_csv", "an existing CSV file", csv_name)
        text = res.read_text()
    else:
        text = path.read_text()
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise SpecError("scale_out.tree_csv", "at least one host row", csv_name)
    for col in columns:
        if col not in rows[0]:
            raise SpecError("scale_out.tree_columns", f"columns of {csv_name} ({', '.join(rows[0])})", col)
    paths = sorted(tuple(row[c] for c in reversed(columns)) for row in rows)  # root first
    tree = np.empty((len(paths), len(columns)), dtype=np.int64)
    for t in range(len(columns)):
        depth = len(columns) - t  # leaf: the whole path; its parent: the path without the leaf ...
        keys = [p[:depth] for p in paths]
        ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        tree[:, t] = [ids[k] for k in keys]
    return tree, len(paths)
