"""NCCL's multi-node refinements (tuning.cc ncclTopoTuneModel): LL's bandwidth cap llMaxBw and the
network post overhead on every intra-node ring step, against closed forms."""

import pytest

from wanka.cluster import load_cluster
from wanka.comm import collective_time, group_for_stride
from wanka.comm import collectives as C
from wanka.comm import nccl_model as K

MB = 1 << 20


@pytest.fixture(scope="module")
def meta():
    return load_cluster("meta-24k-h100")  # 8 GPUs per node, 450 GB/s NVLink, 50 GB/s NIC, leaf 2.5 us


def test_ll_ring_over_64_nodes_is_the_capped_closed_form(meta):
    n, S = 512, 100 * MB
    g = group_for_stride(meta, n, 1)
    nodes = n // 8
    # 448 NVLink steps at max(0.6, 1.0 net overhead) us, 63 network steps at 2.7 us (+ the levels'
    # extra latency above the leaf, as the uncapped model prices them), bus bandwidth capped at 20.4 GB/s
    edges = C._ring_edges(g)
    assert sum(edges) == n - 1 and edges[0] == n - nodes
    lat = K.BASE_LAT_US["ring"][0] + edges[0] * 1.0 + sum(
        e * C._level_lat_us(meta, i, "ring", 0) for i, e in enumerate(edges) if i > 0)
    expect = lat * 1e-6 + (n - 1) / n * S / 20.4e9
    assert C._ring_time_s(meta, "all_gather", S, g, 0) == pytest.approx(expect, rel=1e-12)


def test_simple_intra_steps_keep_nvlink_latency_above_three_net_overheads(meta):
    # Simple: max(3.4, 3 x 1.0) = 3.4 us: the refinement leaves it unchanged
    assert C._level_lat_us(meta, 0, "ring", 2, multi_node=True) == pytest.approx(3.4)
    assert C._level_lat_us(meta, 0, "ring", 1, multi_node=True) == pytest.approx(1.9)
    assert C._level_lat_us(meta, 0, "ring", 0, multi_node=True) == pytest.approx(1.0)
    assert C._level_lat_us(meta, 0, "ring", 0, multi_node=False) == pytest.approx(0.6)


def test_one_node_is_not_capped(meta):
    g = group_for_stride(meta, 8, 1)
    S = 64 * MB
    uncapped = 0.5 * 450 * K.LINK_EFFICIENCY_SCALE_UP  # 180 GB/s, above every llMaxBw multi-node value
    t = C._ring_time_s(meta, "all_gather", S, g, 0)
    assert t == pytest.approx((6.6 + 7 * 0.6) * 1e-6 + 7 / 8 * S / (uncapped * 1e9), rel=1e-12)


def test_two_nodes_use_the_two_node_cap(meta):
    g = group_for_stride(meta, 16, 1)
    assert C._protocol_bw(360.0, g, 0) == pytest.approx(39.0)
    assert C._protocol_bw(360.0, g, 1) == pytest.approx(360.0 * 0.92)


def test_mid_size_gather_over_many_nodes_leaves_ll(meta):
    # 100 MB over 512 ranks: the capped LL is slower than LL128, so the chosen time is LL128's
    g = group_for_stride(meta, 512, 1)
    S = 100 * MB
    best = collective_time(meta, "all_gather", S, g, "ring")
    assert best == pytest.approx(min(C._ring_time_s(meta, "all_gather", S, g, p) for p in (1, 2)), rel=1e-12)
    assert C._ring_time_s(meta, "all_gather", S, g, 0) > best


def test_hierarchical_network_phases_take_the_ll_cap(meta, monkeypatch):
    # the hierarchical algorithm's network phases are rings over f units of nodes: LL there is capped like a ring's
    g = group_for_stride(meta, 64, 1)
    assert g.fanout[0] == 8 and any(f > 1 for f in g.fanout[1:])
    S = 64 * MB
    before = C._hierarchical_time_s(meta, "all_reduce", S, g, 0)
    caps = K.LL_MAX_BW_MULTI_NODE_GBPS  # (2 nodes, more): the 4-unit phase here is held at 20.4 of its 23 GB/s
    monkeypatch.setattr(K, "LL_MAX_BW_MULTI_NODE_GBPS", (1.0, 1.0))  # a cap far below every NIC
    after = C._hierarchical_time_s(meta, "all_reduce", S, g, 0)
    expect, share = 0.0, S / g.fanout[0]  # what each GPU carries out of the NVLink reduce-scatter
    for i, f in enumerate(g.fanout[1:], start=1):
        if f > 1:
            was = min(C._link_GBps(meta, i) * K.PROTOCOL_BW[0], caps[0 if f <= 2 else 1])
            expect += 2 * (f - 1) / f * share * (1 / 1e9 - 1 / (was * 1e9))
            share /= f
    assert after - before == pytest.approx(expect, rel=1e-9)
    # the NVLink phase stays uncapped: a one-node group is unchanged by the cap
    one = group_for_stride(meta, 8, 1)
    monkeypatch.undo()
    t1 = C._hierarchical_time_s(meta, "all_reduce", S, one, 0)
    monkeypatch.setattr(K, "LL_MAX_BW_MULTI_NODE_GBPS", (1.0, 1.0))
    assert C._hierarchical_time_s(meta, "all_reduce", S, one, 0) == pytest.approx(t1, rel=1e-12)
