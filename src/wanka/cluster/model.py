"""The Cluster: nodes of GPUs, scale-up domains, a scale-out fabric, optional campuses.

A cluster is seen by the layers above as a hierarchy of `Level`s, innermost first. Each level says
how many GPUs it spans, the bandwidth one GPU gets to a peer that is first reached at that level
(per direction), and the one-way latency of a small message crossing it. Collectives are priced
level by level on this list (wanka.comm); the scheduler places gangs on `node_groups()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from wanka.cluster.fabric import Fabric, dragonfly, fat_tree, smallest_tiers
from wanka.cluster.spec import ClusterSpec
from wanka.errors import SpecError
from wanka.hardware import GPU, gpu, inline_gpu, nic
from wanka.hardware.catalog import DTYPES, EfficiencyScale


@dataclass(frozen=True)
class Level:
    name: str
    span_gpus: int  # GPUs reachable without leaving this level
    bandwidth_GBps: float  # per GPU per direction, to a peer first reached at this level
    latency_us: float  # one way, small message


class Cluster:
    """A validated cluster spec plus everything derived from it."""

    def __init__(self, spec: ClusterSpec, tree: np.ndarray | None = None):
        self.spec = spec
        self.gpu: GPU = gpu(spec.gpu) if isinstance(spec.gpu, str) else inline_gpu(spec.gpu)
        self.network_efficiency_scale = 1.0  # calibrated multiplier on the link efficiencies (wanka.comm)
        if spec.efficiency is not None:  # a calibrated profile (`wanka plan calibrate`)
            e = spec.efficiency
            self.gpu = self.gpu.model_copy(update={"efficiency_scale": EfficiencyScale(
                gemm=e.gemm, attention=e.attention, hbm=e.hbm)})
            self.network_efficiency_scale = e.network
        self._tree = tree  # explicit topology: (nodes, tiers) leaf-first group ids
        self._node_groups: dict[str, np.ndarray] | None = None
        so = spec.scale_out
        if so.nic is not None:
            card = nic(so.nic, field="scale_out.nic")
            if "bandwidth_Gbps" not in so.model_fields_set:
                so = so.model_copy(update={"bandwidth_Gbps": card.bandwidth_Gbps})
            if "nic_latency_us" not in so.model_fields_set and card.latency_us is not None:
                so = so.model_copy(update={"nic_latency_us": card.latency_us})
        elif "bandwidth_Gbps" not in so.model_fields_set and self.gpu.scale_out_Gbps is not None:
            # neither stated nor a NIC named: the GPU's platform NIC (catalog scale_out_Gbps)
            so = so.model_copy(update={"bandwidth_Gbps": self.gpu.scale_out_Gbps})
        self.scale_out = so
        self.domain = spec.scale_up.domain or max(self.gpu.scale_up.domain, spec.gpus_per_node)
        if self.domain % spec.gpus_per_node:
            raise SpecError("scale_up.domain", f"a multiple of gpus_per_node ({spec.gpus_per_node})", self.domain)
        self.scale_up_GBps = spec.scale_up.bandwidth_GBps or self.gpu.scale_up.bandwidth_GBps
        if self.scale_up_GBps is None:
            raise SpecError("scale_up.bandwidth_GBps", "a value (the catalog has none for this GPU)")
        self.fabric = self._build_fabric()
        self._check_domain_nests()

    def _check_domain_nests(self) -> None:
        """A job need not fill whole scale-up domains: 256 GPUs of GB200 NVL72 racks are three full
        72-GPU domains and a partial one (40 GPUs). The levels above round up to whole domains
        (leaf_gpus), so node groups still nest and the scheduler places gangs on them; collectives
        are priced on the domain span (a group that crosses the partial domain pays scale-out, as
        in the full ones). Only a domain that is not whole nodes is refused (checked above)."""
        return None

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def gpus_per_node(self) -> int:
        return self.spec.gpus_per_node

    @property
    def nodes(self) -> int:
        return self.gpus // self.gpus_per_node

    @property
    def campuses(self) -> int:
        return self.spec.campuses.count

    @property
    def gpus_per_campus(self) -> int:
        return self.gpus // self.campuses

    @property
    def nic_GBps(self) -> float:
        """Scale-out bandwidth per GPU per direction, all planes together (GB/s)."""
        return self.scale_out.bandwidth_Gbps / 8

    # ---- fabric ------------------------------------------------------------------------------
    def _leaf_ports_down(self) -> int | None:
        so = self.scale_out
        if so.leaf_gpus is None:
            return None
        if so.topology == "rail-fat-tree":  # a rail leaf takes one port from each node of its group
            if so.leaf_gpus % self.gpus_per_node:
                raise SpecError("scale_out.leaf_gpus", "a multiple of gpus_per_node for a rail fat-tree", so.leaf_gpus)
            return so.leaf_gpus // self.gpus_per_node
        return so.leaf_gpus

    def _build_fabric(self) -> Fabric:
        so, n = self.scale_out, self.gpus_per_campus
        if so.topology == "explicit":
            assert self._tree is not None, "explicit topology needs its tree (see presets.load_tree)"
            counts = tuple(int(len(np.unique(self._tree[:, t]))) for t in range(self._tree.shape[1]))
            return Fabric(n, self._tree.shape[1], 0, n, counts, n + sum(counts[:-1]))
        if so.topology == "dragonfly":
            return dragonfly(n, so.switch_radix, so.groups)
        d = self._leaf_ports_down()
        tiers = so.tiers or smallest_tiers(n, so.switch_radix, so.oversubscription, d)
        return fat_tree(n, so.switch_radix, tiers, so.oversubscription, so.core_oversubscription, d, so.pod_gpus)

    @cached_property
    def leaf_gpus(self) -> int:
        """GPUs that reach each other through one leaf (rail-optimized: the rail group's nodes)."""
        so = self.scale_out
        if so.topology == "explicit":
            nodes_per_leaf = np.bincount(np.unique(self._tree[:, 0], return_inverse=True)[1])
            return int(np.median(nodes_per_leaf)) * self.gpus_per_node
        d = self.fabric.leaf_ports_down if self.fabric.tiers > 1 else self.gpus_per_campus
        span = d * self.gpus_per_node if so.topology == "rail-fat-tree" else d
        # whole scale-up domains under a leaf (e.g. NVL72 racks of 18 four-GPU trays): levels nest
        span = -(-max(span, self.domain) // self.domain) * self.domain
        return min(span, self.gpus_per_campus)

    @cached_property
    def pod_gpus(self) -> int:
        if self.scale_out.topology == "explicit" and self._tree.shape[1] >= 3:
            per_pod = np.bincount(np.unique(self._tree[:, 1], return_inverse=True)[1])
            return int(np.median(per_pod)) * self.gpus_per_node
        pod = self.fabric.pod_endpoints
        pod = -(-max(pod, self.leaf_gpus) // self.leaf_gpus) * self.leaf_gpus  # whole leaves per pod
        return min(pod, self.gpus_per_campus)

    @cached_property
    def levels(self) -> list[Level]:
        """The hierarchy, innermost first; spans strictly grow and the last spans the cluster."""
        so = self.scale_out
        nic_lat = 2 * so.nic_latency_us  # send and receive NIC
        hop = so.hop_latency_us
        out = [Level("scale-up", min(self.domain, self.gpus), self.scale_up_GBps, self.spec.scale_up.latency_us)]
        if so.topology == "dragonfly":
            tiers = [("group", self.pod_gpus, self.nic_GBps, nic_lat + 3 * hop),
                     ("global", self.gpus_per_campus, self.nic_GBps * so.global_taper, nic_lat + 5 * hop)]
        else:
            tiers = [("leaf", self.leaf_gpus, self.nic_GBps, nic_lat + hop),
                     ("spine", self.pod_gpus, self.nic_GBps / so.oversubscription, nic_lat + 3 * hop),
                     ("core", self.gpus_per_campus,
                      self.nic_GBps / (so.oversubscription * so.core_oversubscription), nic_lat + 5 * hop)]
            if self.fabric.tiers == 2:
                tiers = [tiers[0], ("spine", self.gpus_per_campus, tiers[1][2], tiers[1][3])]
            elif self.fabric.tiers == 1:
                tiers = [("leaf", self.gpus_per_campus, self.nic_GBps, nic_lat + hop)]
        for name, span, bw, lat in tiers:
            if span > out[-1].span_gpus:
                out.append(Level(name, span, bw, lat))
        if self.campuses > 1:
            c = self.spec.campuses
            share = c.link_bandwidth_Tbps * 1000 / 8 / self.gpus_per_campus  # GB/s per GPU when all cross
            top = out[-1]
            out.append(Level("campus", self.gpus, min(top.bandwidth_GBps, share),
                             top.latency_us + 2 * hop + c.link_latency_ms * 1000))
        return out

    def level_of_span(self, group_gpus: int) -> Level:
        """The innermost level that holds a contiguous group of `group_gpus` GPUs."""
        for level in self.levels:
            if group_gpus <= level.span_gpus:
                return level
        return self.levels[-1]

    # ---- derived figures ---------------------------------------------------------------------
    @property
    def switches(self) -> int:
        return self.fabric.switches * self.scale_out.planes * self.campuses

    @property
    def cables(self) -> int:
        return self.fabric.cables * self.scale_out.planes * self.campuses

    def peak_pflops(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for dt in DTYPES:
            per = getattr(self.gpu.peak_tflops, dt)
            out[dt] = None if per is None else per * self.gpus / 1000
        return out

    @property
    def bisection_TBps(self) -> float:
        """Scale-out bisection bandwidth, one direction (TB/s): half the GPUs send to the other half."""
        so = self.scale_out
        n = self.gpus_per_campus
        half = n * self.nic_GBps / 2
        if so.topology == "dragonfly":
            g = max(2, math.ceil(n / self.pod_gpus))
            per_campus = half * so.global_taper * g / (2 * (g - 1))
        elif n <= self.leaf_gpus:
            per_campus = half
        elif n <= self.pod_gpus or self.fabric.tiers == 2:
            per_campus = half / so.oversubscription
        else:
            per_campus = half / (so.oversubscription * so.core_oversubscription)
        total = per_campus * self.campuses / 1000
        if self.campuses > 1:  # a cut through the campus links: half the campuses' links cross it
            total = min(total, self.spec.campuses.link_bandwidth_Tbps / 8 * self.campuses / 2)
        return total

    def power_MW(self) -> dict[str, float | None]:
        """IT power (GPUs at TDP, hosts, switches) and facility power via PUE, in MW."""
        p = self.spec.power
        if self.gpu.tdp_W is None:
            return {"gpu": None, "it": None, "facility": None}
        gpu_W = self.gpus * self.gpu.tdp_W
        it = gpu_W + self.gpus * p.host_W_per_gpu + self.switches * p.switch_W
        return {"gpu": gpu_W / 1e6, "it": it / 1e6, "facility": it * p.pue / 1e6}

    def node_groups(self) -> dict[str, np.ndarray]:
        """Group id of every node at each level above the node (for the scheduler's placement).

        Computed once per cluster (the scheduler and comm ask for it on every placement); the
        arrays are read-only so that no caller can change them for the others."""
        if self._node_groups is None:
            self._node_groups = self._compute_node_groups()
            for ids in self._node_groups.values():
                ids.flags.writeable = False
        return dict(self._node_groups)

    def _compute_node_groups(self) -> dict[str, np.ndarray]:
        idx = np.arange(self.nodes)
        gpn = self.gpus_per_node
        out = {"scale-up": idx // (self.domain // gpn)}
        if self._tree is not None:
            names = ["leaf", "spine", "core"][: self._tree.shape[1]]
            out.update({name: self._tree[:, t].copy() for t, name in enumerate(names)})
        else:
            for level in self.levels[1:]:
                out[level.name] = idx // max(1, level.span_gpus // gpn)
        return out

    def summary(self) -> dict:
        return {
            "name": self.name,
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "scale_up_domain": self.domain,
            "topology": self.scale_out.topology,
            "tiers": self.fabric.tiers,
            "planes": self.scale_out.planes,
            "campuses": self.campuses,
            "peak_pflops": self.peak_pflops(),
            "bisection_TBps": self.bisection_TBps,
            "switches": self.switches,
            "cables": self.cables,
            "power_MW": self.power_MW()["facility"],
            "power": self.power_MW(),
            "pue": self.spec.power.pue,
            "levels": [vars(level) for level in self.levels],
            "notes": self.spec.notes,
        }
