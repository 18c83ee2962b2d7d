"""Fat-tree and dragonfly counts against their closed forms (Al-Fares 2008; Kim 2008)."""

import pytest

from wanka.cluster.fabric import dragonfly, fat_tree
from wanka.errors import SpecError


@pytest.mark.parametrize("k", [4, 8, 16, 32, 48, 64])
def test_three_tier_k_ary_fat_tree(k):
    hosts = k**3 // 4
    f = fat_tree(hosts, k, 3)
    assert f.switches_by_tier == (k * k // 2, k * k // 2, k * k // 4)
    assert f.switches == 5 * k * k // 4
    assert f.cables == 3 * hosts  # host links + edge-agg + agg-core, k^3/4 each
    assert f.pod_endpoints == k * k // 4


@pytest.mark.parametrize("k", [4, 8, 16, 64])
def test_two_tier_leaf_spine(k):
    f = fat_tree(k * k // 2, k, 2)
    assert f.switches_by_tier == (k, k // 2)
    assert f.cables == k * k  # k^2/2 host links + k^2/2 leaf-spine links


def test_oversubscribed_leaf_needs_fewer_spines():
    full = fat_tree(2048, 64, 2)
    over = fat_tree(2048, 64, 2, oversubscription=3.0)
    # 3:1 leaf: 48 down, 16 up -> ceil(2048/48)=43 leaves, ceil(43*16/64)=11 spines
    assert over.switches_by_tier == (43, 11)
    assert full.switches_by_tier == (64, 32)


def test_capacity_errors_name_the_field():
    with pytest.raises(SpecError, match="scale_out.tiers"):
        fat_tree(64 * 32 + 1, 64, 2)
    with pytest.raises(SpecError, match="scale_out.switch_radix"):
        fat_tree(64**3 // 4 + 1, 64, 3)


def test_dragonfly_balanced_counts():
    k = 16  # p = h = 4, a = 8 routers per group, 32 terminals per group, at most 33 groups
    f = dragonfly(32 * 10, k)
    assert f.switches == 10 * 8
    assert f.cables == 320 + 10 * 8 * 7 // 2 + 10 * 8 * 4 // 2
    with pytest.raises(SpecError):
        dragonfly(32 * 34, k)
