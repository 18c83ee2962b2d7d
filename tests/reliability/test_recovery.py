"""The hot-spare pool: swaps, replenishment after repair, waiting when empty."""

from wanka.reliability.recovery import SparePool, node_replacement_cost_s


def test_pool_hands_out_spares_then_waits_for_repairs():
    pool = SparePool(2)
    assert pool.take(10.0, 100.0) == 0.0  # spare 1, ready at once
    assert pool.take(20.0, 120.0) == 0.0  # spare 2
    assert pool.take(30.0, 130.0) == 100.0  # empty: waits for the first repaired node to come back
    assert (pool.swaps, pool.waits, pool.min_available) == (3, 1, 0)
    assert pool.take(500.0, 600.0) == 120.0  # replenished long before it is needed
    assert pool.waits == 1


def test_empty_pool_waits_for_own_repair():
    pool = SparePool(0)
    assert pool.take(5.0, 86400.0) == 86400.0 and pool.waits == 1
    assert not pool.ready_by(1e9)


def test_replacement_costs():
    assert node_replacement_cost_s("full_restart", 300, 768, 60) == 768
    assert node_replacement_cost_s("hot_spare", 300, 768, 60) == 360
