"""The cluster spec (DESIGN.md "Cluster spec"), validated field by field.

Defaults that stand in for figures a real cluster would state are marked as assumptions in
docs/cluster.md; presets record which of their fields are public and which are defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from wanka.errors import SpecError, from_pydantic
from wanka.specfile import StrictSpec

Topology = Literal["rail-fat-tree", "fat-tree", "dragonfly", "explicit"]


class ScaleUpSpec(StrictSpec):
    domain: int | None = Field(default=None, gt=0, description="GPUs per scale-up domain; default: the GPU's")
    bandwidth_GBps: float | None = Field(default=None, gt=0, description="per GPU per direction")
    # NVLink-class one-way latency; NCCL's tuning table uses 0.6-1.25 us for NVLink hardware latency
    # (sched_network.md section 3.3). 1 us is our default.
    latency_us: float = Field(default=1.0, ge=0)


# what a spec gets when neither it nor its GPU's platform (catalog node_gpus / scale_out_Gbps) says more:
# assumptions, docs/cluster.md
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_SCALE_OUT_GBPS = 400


class ScaleOutSpec(StrictSpec):
    bandwidth_Gbps: float = Field(default=DEFAULT_SCALE_OUT_GBPS, gt=0,
                                  description="per GPU (one NIC per GPU), all planes together")
    nic: str | None = None
    topology: Topology = "rail-fat-tree"
    tiers: Literal[1, 2, 3] | None = None
    switch_radix: int = Field(default=64, ge=4)
    oversubscription: float = Field(default=1.0, ge=1.0, description="leaf down:up ratio")
    core_oversubscription: float = Field(default=1.0, ge=1.0, description="tier-2 down:up ratio (3 tiers)")
    leaf_gpus: int | None = Field(default=None, gt=0, description="GPUs under one leaf (rail group for rail-fat-tree)")
    pod_gpus: int | None = Field(default=None, gt=0, description="GPUs under one tier-2 block (3 tiers)")
    planes: int = Field(default=1, ge=1, le=16)
    # One-way NIC latency and per-switch-hop latency: ConnectX briefs give ~0.6 us per NIC, IB/Ethernet
    # AI switches 0.3-0.8 us per hop. These are defaults (assumptions), to be overridden per cluster.
    nic_latency_us: float = Field(default=1.0, ge=0)
    hop_latency_us: float = Field(default=0.5, ge=0)
    groups: int | None = Field(default=None, gt=1, description="dragonfly groups")
    global_taper: float = Field(default=1.0, gt=0, le=1.0, description="dragonfly global:injection bandwidth")
    tree_csv: str | None = None
    tree_columns: list[str] | None = None

    @model_validator(mode="after")
    def _check(self) -> "ScaleOutSpec":
        if self.switch_radix % 2:
            raise ValueError(f"switch_radix: expected an even number, got {self.switch_radix}")
        if self.topology == "explicit" and not (self.tree_csv and self.tree_columns):
            raise ValueError("tree_csv: expected a CSV path and tree_columns (leaf first) for topology explicit")
        return self


class CampusSpec(StrictSpec):
    count: int = Field(default=1, ge=1)
    link_bandwidth_Tbps: float | None = Field(default=None, gt=0, description="per campus to the others")
    link_latency_ms: float = Field(default=0.2, ge=0, description="one way; ~5 us per km of fibre")

    @model_validator(mode="after")
    def _check(self) -> "CampusSpec":
        if self.count > 1 and self.link_bandwidth_Tbps is None:
            raise ValueError("link_bandwidth_Tbps: expected a value when count > 1")
        return self


class PowerSpec(StrictSpec):
    pue: float = Field(default=1.25, ge=1.0, le=3.0)
    host_W_per_gpu: float = Field(default=575, ge=0)
    switch_W: float = Field(default=1500, ge=0)
    electricity_usd_per_kWh: float = Field(default=0.08, ge=0)


class EfficiencySpec(StrictSpec):
    """Calibrated multipliers on the planner's global efficiency constants for this cluster
    (wanka.plan.efficiency GEMM_EFFICIENCY, ATTENTION_EFFICIENCY, HBM_EFFICIENCY and the comm
    layer's LINK_EFFICIENCY_*); written by `wanka plan calibrate`, 1.0 = the built-in constant.
    A scaled efficiency above 1 means the stated peak is below what the hardware reaches."""

    gemm: float = Field(default=1.0, gt=0, le=20)
    attention: float = Field(default=1.0, gt=0, le=20)
    hbm: float = Field(default=1.0, gt=0, le=20)
    network: float = Field(default=1.0, gt=0, le=20)


class ClusterSpec(StrictSpec):
    name: str = Field(min_length=1)
    gpu: str | dict[str, Any]
    gpus: int = Field(gt=0)
    # default: the GPU's platform (catalog node_gpus: 4 for a GB200/GB300 compute tray), else 8
    gpus_per_node: int = Field(default=DEFAULT_GPUS_PER_NODE, gt=0, le=72)
    scale_up: ScaleUpSpec = ScaleUpSpec()
    scale_out: ScaleOutSpec = ScaleOutSpec()
    campuses: CampusSpec = CampusSpec()
    power: PowerSpec = PowerSpec()
    efficiency: EfficiencySpec | None = None  # from `wanka plan calibrate` (docs/plan.md "Calibrate")
    notes: list[str] = []

    @model_validator(mode="before")
    @classmethod
    def _platform_node(cls, data: Any) -> Any:
        """gpus_per_node not stated: the GPU's platform node (catalog `node_gpus`), as scale_up.domain
        defaults to the GPU's domain; 8 where the catalog has none or the GPU is unknown (that error is
        reported on `gpu` by the Cluster)."""
        if isinstance(data, dict) and "gpus_per_node" not in data:
            node = platform(data.get("gpu"))[0]
            if node is not None:
                data = {**data, "gpus_per_node": node}
        return data

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        if self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus: expected a multiple of gpus_per_node ({self.gpus_per_node}), got {self.gpus}")
        nodes = self.gpus // self.gpus_per_node
        if nodes % self.campuses.count:
            raise ValueError(f"campuses.count: expected a divisor of the node count ({nodes}), got {self.campuses.count}")
        return self


def platform(gpu: Any) -> tuple[int | None, float | None]:
    """(GPUs per node, scale-out Gb/s per GPU) of a GPU's usual platform: the catalog entry's
    `node_gpus` / `scale_out_Gbps` for a name, the same keys of an inline GPU mapping; None for what
    is not known (an unknown name included)."""
    if isinstance(gpu, dict):
        node, bw = gpu.get("node_gpus"), gpu.get("scale_out_Gbps")
    elif isinstance(gpu, str):
        from wanka.hardware.catalog import gpu as catalog_gpu

        try:
            entry = catalog_gpu(gpu)
        except SpecError:
            return None, None
        node, bw = entry.node_gpus, entry.scale_out_Gbps
    else:
        return None, None
    node = node if isinstance(node, int) and not isinstance(node, bool) and node > 0 else None
    bw = bw if isinstance(bw, (int, float)) and not isinstance(bw, bool) and bw > 0 else None
    return node, bw


def parse_cluster_spec(data: dict[str, Any], source: str | None = None) -> ClusterSpec:
    try:
        return ClusterSpec(**data)
    except ValidationError as exc:
        raise from_pydantic(exc, source=source) from None
    except TypeError as exc:  # e.g. a non-mapping where a section was expected
        raise SpecError("spec", "a mapping of cluster fields", str(exc), source=source) from None
