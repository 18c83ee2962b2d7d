"""Placement of communicators on the hierarchy (wanka.comm.groups)."""

import math

import pytest

from wanka.cluster import load_cluster
from wanka.comm import Group, group_for_stride, group_of_gpus
from wanka.errors import SpecError


@pytest.fixture(scope="module")
def w10k():
    return load_cluster("wanka-10k")  # levels: scale-up 8, leaf 256, spine 1024, core 10240


def test_stride_groups_follow_the_levels(w10k):
    assert group_for_stride(w10k, 8, 1).fanout == (8, 1, 1, 1)  # a TP group: one domain
    assert group_for_stride(w10k, 128, 8).fanout == (1, 32, 4, 1)  # DP over 128 nodes
    assert group_for_stride(w10k, 16, 1).fanout == (8, 2, 1, 1)
    assert group_for_stride(w10k, 10, 1024).fanout == (1, 1, 1, 10)  # one GPU per spine block


def test_regular_groups_multiply_to_their_size(w10k):
    for size, stride in [(8, 1), (64, 8), (128, 8), (1280, 8), (4, 2048), (10240, 1)]:
        g = group_for_stride(w10k, size, stride)
        assert math.prod(g.fanout) == size, (size, stride, g.fanout)


def test_placed_ids_give_the_same_group_as_the_stride(w10k):
    for size, stride in [(8, 1), (128, 8), (32, 64)]:
        ids = [r * stride for r in range(size)]
        assert group_of_gpus(w10k, ids) == group_for_stride(w10k, size, stride)


def test_irregular_placement_rounds_up(w10k):
    g = group_of_gpus(w10k, [0, 1, 2, 8])  # 3 GPUs in one node, 1 in the next
    assert g.size == 4 and g.fanout == (3, 2, 1, 1)
    assert math.prod(g.fanout) >= g.size


def test_explicit_tree_groups_use_the_real_leaves():
    c = load_cluster("alibaba-lingjun")
    groups = c.node_groups()
    leaf = groups["leaf"]
    a, b = 0, next(n for n in range(c.nodes) if leaf[n] != leaf[0])
    g = group_of_gpus(c, [a * c.gpus_per_node, b * c.gpus_per_node])
    assert g.size == 2 and g.top_level >= 1


def test_bad_groups_are_spec_errors(w10k):
    with pytest.raises(SpecError):
        group_for_stride(w10k, 0, 1)
    with pytest.raises(SpecError):
        group_for_stride(w10k, 2, 10240)
    with pytest.raises(SpecError):
        group_of_gpus(w10k, [10240])
    assert Group(2, (2, 1, 1, 1)).top_level == 0


def test_two_campus_group_crosses_the_campus_link():
    c = load_cluster("baidu-supernode-2campus")
    half = c.gpus // 2
    g = group_of_gpus(c, [0, half])
    assert g.top_level == len(c.levels) - 1
    from wanka.comm import collective_time

    inside = group_of_gpus(c, [0, 64])
    assert collective_time(c, "all_reduce", 1 << 20, g) > 10 * collective_time(c, "all_reduce", 1 << 20, inside)
