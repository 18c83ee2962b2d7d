"""Failure model: causes with rates per device-hour, drawn as one superposed Poisson process.

A job on G GPUs (G/gpus_per_node nodes) sees each cause c as a Poisson process of rate
lambda_c = rate_c_per_unit_hour x units_c(G). The superposition of independent Poisson processes is
Poisson with rate Lambda = sum(lambda_c), and each arrival is cause c with probability lambda_c/Lambda
(per-cause thinning). So for a window of T hours we draw K ~ Poisson(Lambda T), K sorted uniform
arrival times and K categorical causes -- never a per-GPU, per-hour loop. The taxonomies and their
sources live in taxonomy.yaml next to this file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import yaml

from wanka.errors import SpecError

RECOVERY = ("restart", "node_swap")
SCOPES = ("job", "node")
DETECT = ("explicit", "hang")
GROUP_UNITS = ("rack", "leaf", "spine")  # a failure of one takes down every node under it (blast radius)
UNITS = ("gpu", "node") + GROUP_UNITS


@dataclass(frozen=True)
class Cause:
    name: str
    component: str
    unit: str  # gpu | node
    rate_per_unit_hour: float
    recovery: str  # restart | node_swap
    scope: str  # job | node
    detect: str  # explicit | hang
    precursor_share: float = 0.0
    # group units (rack | leaf | spine): nodes under one group, set from the cluster's topology by
    # `resolve_groups` (until then 1, i.e. one group per node); the rate is per group, or per switch
    # when per_switch (a rail-optimized leaf group has one leaf switch per rail)
    nodes_per_unit: float = 1.0
    switches_per_unit: float = 1.0
    per_switch: bool = False
    repair_h: float | None = None  # time until the failed unit is back; None: the scenario's repair_h

    @property
    def blast(self) -> str:
        """What one failure takes down: a node, or every node of a rack / leaf / spine group."""
        return self.unit if self.unit in GROUP_UNITS else "node"

    def units(self, gpus: int, gpus_per_node: int) -> float:
        if self.unit == "gpu":
            return gpus
        nodes = gpus / gpus_per_node
        if self.unit == "node":
            return nodes
        return nodes / self.nodes_per_unit * (self.switches_per_unit if self.per_switch else 1.0)


@dataclass(frozen=True)
class FailureModel:
    name: str
    causes: tuple[Cause, ...]
    manual_fraction: float = 0.0  # share of unexpected interruptions that need manual intervention
    source: str = ""

    def rates_per_hour(self, gpus: int, gpus_per_node: int) -> np.ndarray:
        """Job-level rate of each cause (events per wall-clock hour) for a job on `gpus` GPUs."""
        return np.array([c.rate_per_unit_hour * c.units(gpus, gpus_per_node) for c in self.causes])

    def rate_per_hour(self, gpus: int, gpus_per_node: int) -> float:
        return float(self.rates_per_hour(gpus, gpus_per_node).sum())

    def mtbf_h(self, gpus: int, gpus_per_node: int, where=None) -> float:
        """Mean time between failures of a job (all causes, or those for which where(cause) is true)."""
        rates = self.rates_per_hour(gpus, gpus_per_node)
        if where is not None:
            rates = rates * np.array([bool(where(c)) for c in self.causes])
        total = float(rates.sum())
        return float("inf") if total <= 0 else 1.0 / total

    def scaled(self, factor: float) -> "FailureModel":
        causes = tuple(replace(c, rate_per_unit_hour=c.rate_per_unit_hour * factor) for c in self.causes)
        return replace(self, causes=causes)

    def draw(self, rng: np.random.Generator, hours: float, gpus: int, gpus_per_node: int) -> tuple[np.ndarray, np.ndarray]:
        """Arrival times (hours, sorted) and cause indices over [0, hours) for one run."""
        rates = self.rates_per_hour(gpus, gpus_per_node)
        total = rates.sum()
        if total <= 0 or hours <= 0:
            return np.empty(0), np.empty(0, dtype=np.int64)
        k = rng.poisson(total * hours)
        times = np.sort(rng.random(k)) * hours  # order statistics of a Poisson process on [0, hours)
        causes = rng.choice(len(rates), size=k, p=rates / total)
        return times, causes


# ---- loading -------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _taxonomy() -> dict[str, Any]:
    text = (resources.files("wanka.reliability") / "taxonomy.yaml").read_text()
    return yaml.safe_load(text)["models"]


def failure_model_names() -> list[str]:
    return sorted(_taxonomy())


def _cause_from(raw: dict[str, Any], exposure: dict[str, Any] | None, field: str) -> Cause:
    for key, allowed in (("recovery", RECOVERY), ("scope", SCOPES), ("detect", DETECT), ("unit", UNITS)):
        value = raw.get(key, "explicit" if key == "detect" else None)
        if value not in allowed:
            raise SpecError(f"{field}.{key}", f"one of {', '.join(allowed)}", value)
    per_switch = "rate_per_switch_day" in raw
    if per_switch and raw["unit"] not in GROUP_UNITS:
        raise SpecError(f"{field}.rate_per_switch_day", f"a group unit ({', '.join(GROUP_UNITS)}) for a per-switch rate", raw["unit"])
    if per_switch:
        rate_h = float(raw["rate_per_switch_day"]) / 24.0
    elif "rate_per_unit_day" in raw:
        rate_h = float(raw["rate_per_unit_day"]) / 24.0
    elif "rate_per_unit_hour" in raw:
        rate_h = float(raw["rate_per_unit_hour"])
    elif "count" in raw and exposure and raw["unit"] in GROUP_UNITS:
        raise SpecError(f"{field}.count", "a rate (rate_per_unit_day or rate_per_switch_day) for a group unit", raw["count"])
    elif "count" in raw and exposure:
        units = exposure["gpus"] if raw["unit"] == "gpu" else exposure["gpus"] / exposure["gpus_per_node"]
        rate_h = float(raw["count"]) / (units * exposure["days"] * 24.0)
    else:
        raise SpecError(f"{field}.rate_per_unit_day", "a rate (rate_per_unit_day, rate_per_unit_hour, or count with the model's exposure)")
    if rate_h < 0:
        raise SpecError(f"{field}.rate_per_unit_day", "a rate >= 0", rate_h)
    share = float(raw.get("precursor_share", 0.0))
    if not 0.0 <= share <= 1.0:
        raise SpecError(f"{field}.precursor_share", "a share in [0, 1]", share)
    repair = raw.get("repair_h")
    if repair is not None and not float(repair) >= 0:
        raise SpecError(f"{field}.repair_h", "hours >= 0", repair)
    return Cause(name=str(raw.get("name", "cause")), component=str(raw.get("component", "unknown")),
                 unit=raw["unit"], rate_per_unit_hour=rate_h, recovery=raw["recovery"], scope=raw["scope"],
                 detect=raw.get("detect", "explicit"), precursor_share=share, per_switch=per_switch,
                 nodes_per_unit=float(raw.get("nodes_per_unit", 1.0)),
                 repair_h=None if repair is None else float(repair))


def build_failure_model(data: dict[str, Any], name: str = "custom", field: str = "failures") -> FailureModel:
    """A failure model from a mapping with `causes` (and optional exposure, manual_fraction).

    `extends: OTHER` starts from another taxonomy model: its causes are kept, except those a cause of
    the same name in this model replaces, and this model's other causes are added.
    """
    if "extends" in data:
        base = _taxonomy().get(data["extends"])
        if base is None:
            raise SpecError(f"{field}.extends", f"a failure model ({', '.join(sorted(_taxonomy()))})", data["extends"])
        own = {c["name"]: c for c in data.get("causes", [])}
        merged = [own.pop(c["name"], c) for c in base["causes"]] + list(own.values())
        data = {**base, **{k: v for k, v in data.items() if k != "extends"}, "causes": merged}
    causes_raw = data.get("causes")
    if not isinstance(causes_raw, list) or not causes_raw:
        raise SpecError(f"{field}.causes", "a non-empty list of causes")
    exposure = data.get("exposure")
    causes = tuple(_cause_from(c, exposure, f"{field}.causes[{i}]") for i, c in enumerate(causes_raw))
    manual = float(data.get("manual_fraction", 0.0))
    if not 0.0 <= manual <= 1.0:
        raise SpecError(f"{field}.manual_fraction", "a share in [0, 1]", manual)
    return FailureModel(name=name, causes=causes, manual_fraction=manual, source=str(data.get("source", "")))


def resolve_groups(model: FailureModel, node_groups: dict[str, np.ndarray], job_nodes: np.ndarray,
                   switches: dict[str, float] | None = None,
                   replica_nodes: int = 1) -> tuple[FailureModel, list[np.ndarray | None]]:
    """Fit the group causes to a placement: `job_nodes` (node ids) on a cluster whose `node_groups`
    give every node's group id per level ("rack", "leaf", "spine").

    Returns the model with each group cause's `nodes_per_unit` set so that units() counts the groups
    the job touches (a failure of any of them hits the job), and per cause the number of the job's
    nodes in each touched group and the data-parallel replicas (`replica_nodes` consecutive nodes
    each) they belong to, as rows (nodes, replicas); None for node and GPU causes.
    """
    causes, blast = [], []
    for c in model.causes:
        if c.unit not in GROUP_UNITS:
            causes.append(c)
            blast.append(None)
            continue
        _, inv, counts = np.unique(node_groups[c.unit][job_nodes], return_inverse=True, return_counts=True)
        replicas = [len(np.unique(job_nodes[inv == g] // max(1, replica_nodes))) for g in range(len(counts))]
        causes.append(replace(c, nodes_per_unit=len(job_nodes) / len(counts),
                              switches_per_unit=(switches or {}).get(c.unit, 1.0)))
        blast.append(np.stack([counts, replicas], axis=1).astype(np.int64))
    return replace(model, causes=tuple(causes)), blast


def load_failure_model(name: str, field: str = "failures.model") -> FailureModel:
    models = _taxonomy()
    if name not in models:
        raise SpecError(field, f"a failure model ({', '.join(sorted(models))})", name)
    return build_failure_model(models[name], name, field)
