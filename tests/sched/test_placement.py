"""Hand-made clusters with known optimal placements (tiny4: node n holds GPUs 4n..4n+3, leaf = 4 nodes)."""

from wanka.sched.placement import first_fit, minimal_spread, spread, topo_bestfit
from wanka.sched.state import FreeGPUs

TOP = 2  # tiny4 levels: leaf 0, spine 1, core 2


def occupy(free: FreeGPUs, used: dict[int, int]) -> None:
    for node, k in used.items():
        free.take(node, k, slot=99)


def test_kueue_kep_example_best_fit_picks_3_3_then_exact_1(tiny4):
    # KEP-2724: a rack whose nodes fit 3, 3, 2, 1 pods; a PodSet of 7 -> 3, 3 and the exact-fit 1.
    free = FreeGPUs(tiny4)
    occupy(free, {0: 1, 1: 1, 2: 2, 3: 3})  # leaf 0 free: 3, 3, 2, 1
    occupy(free, {n: 4 for n in range(4, 16)})  # every other leaf full
    placed = topo_bestfit(free, 7, TOP)
    assert sorted(placed) == [(0, 3), (1, 3), (3, 1)]


def test_single_node_gang_takes_best_fit_node(tiny4):
    free = FreeGPUs(tiny4)
    occupy(free, {0: 1, 5: 2, 9: 3})  # free 3 on node 0, 2 on node 5, 1 on node 9
    assert topo_bestfit(free, 2, TOP) == [(5, 2)]  # fewest free GPUs that still hold 2
    assert topo_bestfit(free, 1, TOP) == [(9, 1)]
    assert first_fit(free, 2, TOP) == [(0, 2)]  # first-fit: lowest index


def test_gang_packs_into_fullest_leaf_that_holds_it(tiny4):
    free = FreeGPUs(tiny4)
    occupy(free, {0: 4, 1: 4})  # leaf 0 has 8 free; leaves 1-3 have 16
    placed = topo_bestfit(free, 8, TOP)
    assert sorted(placed) == [(2, 4), (3, 4)]  # both whole free nodes of leaf 0
    assert spread(free, [n for n, _ in placed]) == minimal_spread(free, 8) == (2, 1, 1, 1)


def test_first_fit_spreads_where_best_fit_does_not(tiny4):
    free = FreeGPUs(tiny4)
    occupy(free, {0: 3, 1: 3, 2: 3, 3: 3})  # one free GPU on each node of leaf 0
    ff = first_fit(free, 4, TOP)
    assert ff == [(0, 1), (1, 1), (2, 1), (3, 1)]  # four nodes
    assert topo_bestfit(free, 4, TOP) == [(4, 4)]  # one whole node


def test_gang_larger_than_a_leaf_stays_in_one_spine_block(tiny4):
    free = FreeGPUs(tiny4)
    occupy(free, {4: 4, 12: 2})  # spine 0 free 28, spine 1 free 30
    placed = topo_bestfit(free, 24, TOP)
    nodes = [n for n, _ in placed]
    assert all(n < 8 for n in nodes)  # best-fit spine block: the one with less free (28)
    assert sum(k for _, k in placed) == 24
    assert spread(free, nodes)[1:] == (2, 1, 1)  # two leaves, one spine block


def test_topology_request_waits_rather_than_spread(tiny4):
    free = FreeGPUs(tiny4)
    occupy(free, {n: 2 for n in range(16)})  # 2 free on every node: 8 per leaf, 32 in all
    assert topo_bestfit(free, 12, free.level("leaf")) is None  # no leaf holds 12
    assert first_fit(free, 12, free.level("leaf")) is None
    assert topo_bestfit(free, 3, free.level("scale-up")) is None  # no node holds 3
    assert len(topo_bestfit(free, 12, free.level("spine"))) == 6


def test_counters_follow_take_and_give_back(tiny4):
    free = FreeGPUs(tiny4)
    ids = free.take(6, 3, slot=1)
    assert ids == [24, 25, 26] and free.total_avail == 61
    assert free.levels[0].avail.tolist() == [16, 13, 16, 16]
    free.set_ok(6, False)  # drained: its last free GPU is no longer available
    assert free.levels[0].avail.tolist() == [16, 12, 16, 16]
    free.give_back(ids)
    assert free.total_avail == 60 and free.node_free[6] == 4
    free.set_ok(6, True)
    assert free.total_avail == 64
