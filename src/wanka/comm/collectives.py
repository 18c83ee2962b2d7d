"""Time of a collective on a group placed on the cluster hierarchy (docs/comm.md).

Algorithms (sched_network.md section 3.2-3.3):
  ring          one ring through the group in hierarchical order (NCCL's ring: rank order follows
                the topology, so a ring leaves each unit once per channel). Latency: one step per
                ring edge, each priced at the level it crosses. Bandwidth: the tightest level,
                where a unit of level i-1 holding m GPUs of the group pushes the ring across its
                boundary over all m NICs at once (SimAI calbusbw: min(nvlink, nic * nics_per_node)).
  tree          NCCL double binary tree (all-reduce only): a chain inside the scale-up domain and a
                binary tree over the units above; latency 2*((f0-1)*lat0 + sum log2(f_i)*lat_i),
                bandwidth as ring (same 2S/B asymptote; NCCL algBw = 0.5*busBw).
  hierarchical  multi-dimensional reduce-scatter up the levels then all-gather down (ASTRA-sim
                "hierarchical"; 2-level NCCL-style intra-RS / inter-AR / intra-AG); each phase
                is a ring among the f_i peers of that level on 1/prod(f_<i) of the data.
  flat-ring     a topology-UNAWARE ring: rank order ignores the hierarchy, so every edge crosses the
                group's top level and each GPU pushes through its own share of that level.
  auto          NCCL-style choice: the fastest of ring and tree (all-reduce) over protocols
                LL / LL128 / Simple, per message size.
nbytes is the per-rank buffer as in nccl-tests' "size": all_reduce the whole buffer, all_gather the
OUTPUT, reduce_scatter the INPUT, all_to_all what one rank sends in all, send_recv one message.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from wanka.comm import nccl_model as K
from wanka.comm.alltoall_efficiency import alltoall_size_efficiency
from wanka.comm.groups import Group
from wanka.errors import SpecError

if TYPE_CHECKING:
    from wanka.cluster import Cluster

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "flat-ring")


def _level_lat_us(cluster: "Cluster", i: int, algo: str, proto: int, multi_node: bool = False) -> float:
    """Per-step latency of one hop first crossing level i (NCCL constant + extra hardware); in a
    group spanning several scale-up domains a scale-up step costs at least NCCL's network post
    overhead (nccl_model.NET_OVERHEAD_US)."""
    levels = cluster.levels
    if i == 0:
        lat = K.HW_LAT_SCALE_UP_US[algo][proto] + max(0.0, levels[0].latency_us - K.REF_SCALE_UP_LAT_US)
        if multi_node:
            lat = max(lat, K.NET_OVERHEAD_US * (K.NET_OVERHEAD_SIMPLE_FACTOR if proto == 2 else 1.0))
        return lat
    return K.HW_LAT_NET_US[algo][proto] + max(0.0, levels[i].latency_us - K.REF_NET_LAT_US)


def _nodes(g: Group) -> int:
    """Scale-up domains the group spans: NCCL's nNodes."""
    return g.units_used()[0]


def _protocol_bw(busbw: float, g: Group, proto: int) -> float:
    """Bus bandwidth under protocol `proto`: the protocol factor, and for LL over several scale-up
    domains NCCL's llMaxBw cap (nccl_model.LL_MAX_BW_MULTI_NODE_GBPS)."""
    bw = busbw * K.PROTOCOL_BW[proto]
    nodes = _nodes(g)
    if proto == 0 and nodes > 1:
        bw = min(bw, _ll_cap_GBps(nodes))
    return bw


def _ll_cap_GBps(nodes: int) -> float:
    """NCCL's llMaxBw for LL over `nodes` > 1 scale-up domains (nccl_model.LL_MAX_BW_MULTI_NODE_GBPS)."""
    return K.LL_MAX_BW_MULTI_NODE_GBPS[0 if nodes <= 2 else 1]


def _eff(cluster: "Cluster", i: int) -> float:
    """Achieved fraction of a level's link bandwidth; a calibrated profile scales it."""
    base = K.LINK_EFFICIENCY_SCALE_UP if i == 0 else K.LINK_EFFICIENCY_NET
    return base * getattr(cluster, "network_efficiency_scale", 1.0)


def _scale_up_share(cluster: "Cluster", peers: int) -> float:
    """Fraction of the scale-up bandwidth a GPU can use when it exchanges with `peers` GPUs of its domain at
    once: 1 behind a switch; on a mesh part (catalog scale_up.mesh: Gaudi's HLS boards, Intel Gaudi docs
    'Intel Gaudi Network Configuration': 21 ports all-to-all over 8 cards, 3 per peer) only the links to those
    peers exist, each 1/(domain - 1) of the total -- best case, every direct link to a group member busy."""
    gpu = getattr(cluster, "gpu", None)
    if gpu is None or not gpu.scale_up.mesh or peers <= 0:
        return 1.0
    return min(1.0, peers / max(1, gpu.scale_up.domain - 1))


def _link_GBps(cluster: "Cluster", i: int, peers: int = 0, pair: bool = False) -> float:
    """Achieved per-GPU bandwidth of level i's links; at the scale-up level (i = 0) exchanging with `peers`
    GPUs of the domain at once, only the share _scale_up_share gives (a mesh part's direct links); `pair`:
    the group is the two dies of one package, linked at the part's scale_up.pair_GBps where the catalog
    states one (an MI250X's two GCDs: 200 GB/s against 50 between packages, OLCF Frontier user guide)."""
    bw = cluster.levels[i].bandwidth_GBps * _eff(cluster, i)
    if i != 0:
        return bw
    gpu = getattr(cluster, "gpu", None)
    if pair and gpu is not None and gpu.scale_up.pair_GBps:
        return gpu.scale_up.pair_GBps * _eff(cluster, 0)
    return bw * _scale_up_share(cluster, peers)


def _ring_busbw_GBps(cluster: "Cluster", g: Group) -> float:
    m = g.gpus_per_unit()
    bw = _link_GBps(cluster, 0, g.fanout[0] - 1, g.pair) if g.fanout[0] > 1 else math.inf
    for i in range(1, len(g.fanout)):
        if g.fanout[i] > 1:  # some ring edges leave a level-(i-1) unit inside a level-i unit
            bw = min(bw, m[i - 1] * _link_GBps(cluster, i))
    return bw


def _ring_edges(g: Group) -> list[int]:
    """Ring edges (of size-1, NCCL's step count) whose outermost crossed level is i."""
    n = g.units_used()
    cross = [g.size - 1] + [max(u - 1, 0) for u in n]  # cross[i+1]: edges leaving level-i units
    return [cross[i] - cross[i + 1] for i in range(len(n))]


def _steps(kind: str, n: int) -> tuple[float, float]:
    """(latency multiplier on the ring's edge latencies, bus factor on S/busbw)."""
    if kind == "all_reduce":
        return 2.0, 2.0 * (n - 1) / n
    return 1.0, (n - 1) / n


def _ring_time_s(cluster, kind, nbytes, g, proto) -> float:
    lat_mult, bus = _steps(kind, g.size)
    lat = K.BASE_LAT_US["ring"][proto]
    multi = _nodes(g) > 1
    for i, edges in enumerate(_ring_edges(g)):
        lat += lat_mult * edges * _level_lat_us(cluster, i, "ring", proto, multi)
    bw = _protocol_bw(_ring_busbw_GBps(cluster, g), g, proto)
    return lat * 1e-6 + bus * nbytes / (bw * 1e9)


def _tree_time_s(cluster, nbytes, g, proto) -> float:
    lat = (g.fanout[0] - 1) * _level_lat_us(cluster, 0, "tree", proto, _nodes(g) > 1)
    for i in range(1, len(g.fanout)):
        if g.fanout[i] > 1:
            lat += math.ceil(math.log2(g.fanout[i])) * _level_lat_us(cluster, i, "tree", proto)
    lat = K.BASE_LAT_US["tree"][proto] + 2 * lat
    _, bus = _steps("all_reduce", g.size)
    bw = _protocol_bw(_ring_busbw_GBps(cluster, g), g, proto)
    return lat * 1e-6 + bus * nbytes / (bw * 1e9)


def _flat_ring_time_s(cluster, kind, nbytes, g, proto) -> float:
    top = g.top_level
    lat_mult, bus = _steps(kind, g.size)
    lat = K.BASE_LAT_US["ring"][proto] + lat_mult * (g.size - 1) * _level_lat_us(cluster, top, "ring", proto)
    bw = _protocol_bw(_link_GBps(cluster, top, g.size - 1, g.pair), g, proto)
    return lat * 1e-6 + bus * nbytes / (bw * 1e9)


def _hierarchical_time_s(cluster, kind, nbytes, g, proto) -> float:
    """Reduce-scatter level by level inside-out, then all-gather outside-in (each a ring)."""
    total = K.BASE_LAT_US["ring"][proto] * 1e-6
    share = float(nbytes)
    for i, f in enumerate(g.fanout):
        if f <= 1:
            continue
        bw = _link_GBps(cluster, i, f - 1, g.pair) * K.PROTOCOL_BW[proto]
        if proto == 0 and i >= 1:  # a network phase's ring spans f nodes: NCCL's multi-node LL cap
            bw = min(bw, _ll_cap_GBps(f))
        phase = (f - 1) * _level_lat_us(cluster, i, "ring", proto) * 1e-6 + (f - 1) / f * share / (bw * 1e9)
        total += phase * (2 if kind == "all_reduce" else 1)
        share /= f
    return total


def _all_to_all_time_s(cluster, nbytes, g) -> float:
    """Each rank sends nbytes/size to every peer; traffic to peers first reached at level i
    crosses level i and every level below it on the way out (the NIC for all network levels);
    the bandwidth term is divided by the measured size/node-count efficiency (alltoall_efficiency)."""
    n = g.size
    if n == 1:
        return 0.0
    m = g.gpus_per_unit()
    per_peer = nbytes / n
    bytes_at = [per_peer * (m[0] - 1)] + [per_peer * (m[i] - m[i - 1]) for i in range(1, len(m))]
    t_bw = bytes_at[0] / (_link_GBps(cluster, 0, m[0] - 1, g.pair) * 1e9)
    for i in range(1, len(m)):
        through = sum(bytes_at[i:])  # everything that leaves a level-(i-1) unit crosses level i
        if through > 0:
            t_bw = max(t_bw, through / (_link_GBps(cluster, i) * 1e9))
    # measured fall-off below large messages, by how many scale-up domains the group spans
    t_bw /= alltoall_size_efficiency(nbytes, g.units_used()[0])
    top = g.top_level
    lat_us = K.BASE_LAT_US["ring"][2] + 2 * _level_lat_us(cluster, top, "ring", 2) + K.A2A_PER_PEER_US * (n - 1)
    return lat_us * 1e-6 + t_bw


def _send_recv_time_s(cluster, nbytes, g) -> float:
    top = g.top_level
    best = math.inf
    for proto in range(len(K.PROTOCOLS)):
        bw = _link_GBps(cluster, top, 1, g.pair) * K.PROTOCOL_BW[proto]  # one peer: one mesh link
        lat = K.BASE_LAT_US["ring"][proto] + _level_lat_us(cluster, top, "ring", proto)
        best = min(best, lat * 1e-6 + nbytes / (bw * 1e9))
    return best


def collective_time(cluster: "Cluster", kind: str, nbytes: float, group: Group, algorithm: str = "auto") -> float:
    """Seconds for one collective of `kind` on `group` (see the module docstring)."""
    if kind not in KINDS:
        raise SpecError("kind", " | ".join(KINDS), kind)
    if algorithm not in ALGORITHMS:
        raise SpecError("algorithm", " | ".join(ALGORITHMS), algorithm)
    if len(group.fanout) != len(cluster.levels):
        raise SpecError("group.fanout", f"one entry per cluster level ({len(cluster.levels)})", group.fanout)
    if not (0 <= nbytes < math.inf):  # written so that NaN (False on every comparison) is refused too
        raise SpecError("nbytes", "a finite size >= 0", nbytes)
    if group.size <= 1 or nbytes == 0:
        return 0.0
    if kind == "all_to_all":
        return _all_to_all_time_s(cluster, nbytes, group)
    if kind == "send_recv":
        return _send_recv_time_s(cluster, nbytes, group)
    if algorithm == "tree" and kind != "all_reduce":
        algorithm = "ring"  # NCCL runs tree for all-reduce only
    best = math.inf
    for proto in range(len(K.PROTOCOLS)):
        if algorithm in ("auto", "ring"):
            best = min(best, _ring_time_s(cluster, kind, nbytes, group, proto))
        if algorithm in ("auto", "tree") and kind == "all_reduce":
            best = min(best, _tree_time_s(cluster, nbytes, group, proto))
        if algorithm == "hierarchical":
            best = min(best, _hierarchical_time_s(cluster, kind, nbytes, group, proto))
        if algorithm == "flat-ring":
            best = min(best, _flat_ring_time_s(cluster, kind, nbytes, group, proto))
    return best


def bus_bandwidth_GBps(kind: str, nbytes: float, size: int, seconds: float) -> float:
    """nccl-tests busbw of a measured or modelled time (PERFORMANCE.md factors)."""
    factor = {"all_reduce": 2 * (size - 1) / size, "send_recv": 1.0}.get(kind, (size - 1) / size)
    return nbytes / seconds * factor / 1e9
