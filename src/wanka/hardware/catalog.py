"""Accelerator and NIC catalog, loaded from catalog.yaml (every figure there cites its source).

Peak TFLOP/s are dense (no structured sparsity). `None` means "not public", never a guess;
callers that need a figure that is None must say so (see `GPU.peak`).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from pydantic import Field, ValidationError

from wanka.errors import SpecError, from_pydantic
from wanka.specfile import StrictSpec

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


class PeakTflops(StrictSpec):
    fp32: float | None = Field(default=None, gt=0)
    tf32: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    fp8: float | None = Field(default=None, gt=0)
    int8: float | None = Field(default=None, gt=0)


class ScaleUp(StrictSpec):
    bandwidth_GBps: float | None = Field(default=None, gt=0, description="per GPU per direction")
    domain: int = Field(default=8, gt=0)
    mesh: bool = Field(default=False, description="no switch: each GPU has its own links to every other GPU of the "
                                                  "domain, bandwidth_GBps split evenly over the domain - 1 peers")
    pair_GBps: float | None = Field(default=None, gt=0,
                                    description="per GPU per direction between the two dies of one package (GPUs 2k "
                                                "and 2k+1: an MI250X's GCDs), where it exceeds bandwidth_GBps")


class EfficiencyScale(StrictSpec):
    """Multipliers a calibrated cluster profile puts on the planner's kernel-efficiency constants
    (wanka.plan.efficiency); 1.0 everywhere for a catalog entry."""

    gemm: float = Field(default=1.0, gt=0)
    attention: float = Field(default=1.0, gt=0)
    hbm: float = Field(default=1.0, gt=0)


class GPU(StrictSpec):
    """One accelerator model."""

    name: str
    vendor: str = "unknown"
    full_name: str = ""
    peak_tflops: PeakTflops
    hbm_GB: float = Field(gt=0)
    hbm_TBps: float | None = Field(default=None, gt=0)
    tdp_W: float | None = Field(default=None, gt=0)
    sms: int | None = Field(default=None, gt=0)  # streaming multiprocessors (null: not published here)
    scale_up: ScaleUp = ScaleUp()
    # the part's usual platform (its vendor's reference server or compute tray): GPUs per node and the
    # scale-out NIC bandwidth per GPU; null where no server document was found. A cluster spec that
    # states neither takes these (wanka.cluster.spec / model), as scale_up.domain
    node_gpus: int | None = Field(default=None, gt=0, le=72)
    scale_out_Gbps: float | None = Field(default=None, gt=0)
    sources: dict[str, str] = {}
    efficiency_scale: EfficiencyScale = EfficiencyScale()

    def peak(self, dtype: str) -> float:
        """Dense peak TFLOP/s for `dtype`; a SpecError if the catalog has no figure for it."""
        value = getattr(self.peak_tflops, dtype, None)
        if value is None:
            raise SpecError(f"gpu {self.name}.peak_tflops.{dtype}", "a published figure (the catalog has none)")
        return value


class NIC(StrictSpec):
    name: str
    vendor: str = "unknown"
    bandwidth_Gbps: float = Field(gt=0)
    latency_us: float | None = Field(default=None, ge=0)
    sources: str = ""


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    return yaml.safe_load((resources.files("wanka.hardware") / "catalog.yaml").read_text())


@lru_cache(maxsize=None)
def gpu(name: str) -> GPU:
    entries = _raw()["gpus"]
    key = name.lower()
    if key not in entries:
        raise SpecError("gpu", f"a catalog name ({', '.join(entries)}) or an inline object", name)
    return GPU(name=key, **entries[key])


def inline_gpu(data: dict[str, Any], field: str = "gpu") -> GPU:
    """An accelerator described inline in a spec: {name, peak_tflops: {...}, hbm_GB, ...}."""
    try:
        return GPU(**data)
    except ValidationError as exc:
        raise from_pydantic(exc, prefix=f"{field}.") from None


def gpu_names() -> list[str]:
    return list(_raw()["gpus"])


def nic(name: str, field: str = "nic") -> NIC:
    entries = _raw()["nics"]
    if name not in entries:
        raise SpecError(field, f"a catalog name ({', '.join(entries)})", name)
    return NIC(name=name, **entries[name])


def nic_names() -> list[str]:
    return list(_raw()["nics"])
