"""Switch, cable and capacity arithmetic of scale-out fabrics (one plane of one campus).

Fat-tree (folded Clos) with radix-k switches, after Al-Fares et al., "A Scalable, Commodity Data
Center Network Architecture" (SIGCOMM 2008): a 3-tier k-ary fat-tree connects k^3/4 hosts with
k^2/2 edge, k^2/2 aggregation and k^2/4 core switches (5k^2/4 in all); 2 tiers connect k^2/2
hosts with k leaves and k/2 spines. We generalise by port budget: a leaf splits its k ports into
d down and u = ceil(d/o) up for an oversubscription o; every tier above is counted as the fewest
switches that terminate the links coming up from below. With o = 1 and a full tree this gives the
closed forms above exactly (tests/cluster/test_fabric.py).

Dragonfly after Kim et al., "Technology-Driven, Highly-Scalable Dragonfly Topology" (ISCA 2008),
balanced configuration: a router of radix k has p = k/4 terminal ports, a = k/2 routers per group
(a-1 local links each) and h = k/4 global ports; at most a*h + 1 groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wanka.errors import SpecError


@dataclass(frozen=True)
class Fabric:
    """Counts for one plane of one campus."""

    endpoints: int
    tiers: int
    leaf_ports_down: int  # d: endpoint ports per leaf (routers: terminals per router)
    pod_endpoints: int  # endpoints under one tier-2 block (== endpoints for <= 2 tiers)
    switches_by_tier: tuple[int, ...]
    cables: int

    @property
    def switches(self) -> int:
        return sum(self.switches_by_tier)


def leaf_split(radix: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a leaf with the given down:up oversubscription."""
    down = int(radix * oversubscription / (1 + oversubscription))
    return down, radix - down


def fat_tree(
    endpoints: int,
    radix: int,
    tiers: int,
    oversubscription: float = 1.0,
    core_oversubscription: float = 1.0,
    leaf_ports_down: int | None = None,
    pod_endpoints: int | None = None,
) -> Fabric:
    k = radix
    if tiers == 1:
        if endpoints > k:
            raise SpecError("scale_out.tiers", f"2 or 3: one switch of radix {k} holds {k} ports, {endpoints} needed")
        return Fabric(endpoints, 1, endpoints, endpoints, (1,), endpoints)
    d, u = leaf_split(k, oversubscription)
    if leaf_ports_down is not None:
        if leaf_ports_down >= k:
            raise SpecError("scale_out.leaf_gpus", f"fewer down ports than the switch radix {k}", leaf_ports_down)
        d, u = leaf_ports_down, min(k - leaf_ports_down, math.ceil(leaf_ports_down / oversubscription))
    leaves = math.ceil(endpoints / d)
    if tiers == 2:
        if leaves > k:
            raise SpecError(
                "scale_out.tiers",
                f"3 tiers or a larger switch_radix: 2 tiers of radix {k} connect at most {k * d} ports, {endpoints} needed",
            )
        spines = math.ceil(leaves * u / k)
        return Fabric(endpoints, 2, d, endpoints, (leaves, spines), endpoints + leaves * u)
    a_down, a_up = leaf_split(k, core_oversubscription)
    pod = pod_endpoints or a_down * d
    pods = math.ceil(endpoints / pod)
    if pods > k:
        raise SpecError(
            "scale_out.switch_radix",
            f"a larger radix or more planes: 3 tiers of radix {k} connect at most {k * pod} ports, {endpoints} needed",
        )
    aggs = math.ceil(leaves * u / a_down)
    cores = math.ceil(aggs * a_up / k)
    return Fabric(endpoints, 3, d, min(pod, endpoints), (leaves, aggs, cores), endpoints + leaves * u + aggs * a_up)


def smallest_tiers(endpoints: int, radix: int, oversubscription: float, leaf_ports_down: int | None) -> int:
    """Fewest fat-tree tiers that connect `endpoints` ports."""
    if endpoints <= radix and leaf_ports_down is None:
        return 1
    d = leaf_ports_down or leaf_split(radix, oversubscription)[0]
    return 2 if math.ceil(endpoints / d) <= radix else 3


def dragonfly(endpoints: int, radix: int, groups: int | None = None) -> Fabric:
    p = h = radix // 4
    a = radix // 2
    per_group = a * p
    g = groups or math.ceil(endpoints / per_group)
    if g > a * h + 1:
        raise SpecError("scale_out.switch_radix", f"a larger radix: a dragonfly of radix {radix} has at most {a * h + 1} groups")
    if endpoints > g * per_group:
        raise SpecError("scale_out.groups", f"at least {math.ceil(endpoints / per_group)} groups for {endpoints} ports", g)
    routers = g * a
    cables = endpoints + g * a * (a - 1) // 2 + g * a * h // 2
    return Fabric(endpoints, 2, p, math.ceil(endpoints / g), (routers,), cables)
