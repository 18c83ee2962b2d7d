"""Placement-aware speed: a spread-out gang gets speed_factor < 1 (priced by wanka.comm) and runs longer."""

import pytest

from wanka import comm
from wanka.sched import Job, Scheduler
from wanka.sched.speed import SpeedModel


def fragment(s: Scheduler) -> None:
    """One free GPU on each node of leaves 0 and 2, leaf 1 full, leaf 3 empty: first-fit spreads an
    8-GPU gang over eight nodes in both spine blocks, best-fit takes two whole nodes of leaf 3."""
    for i, n in enumerate([0, 1, 2, 3, 8, 9, 10, 11]):
        s.free.take(n, 3, slot=10_000 + i)
    for i, n in enumerate([4, 5, 6, 7]):
        s.free.take(n, 4, slot=20_000 + i)


def test_step_is_compute_plus_the_all_reduce_that_wanka_comm_prices(tiny4):
    model = SpeedModel(tiny4)
    ids = list(range(0, 64, 8))  # one GPU on every other node: crosses leaves
    params = model.params_per_gpu * len(ids)
    compute = 6 * params * model.tokens_per_gpu_step / (tiny4.gpu.peak("bf16") * 1e12 * model.mfu)
    all_reduce = comm.collective_time(tiny4, "all_reduce", params * model.bytes_per_param,
                                      comm.group_of_gpus(tiny4, ids))
    assert all_reduce > 0
    assert model.step_s(len(ids), ids) == pytest.approx(compute + all_reduce)


def test_spread_gang_is_slower_and_ends_later(tiny4):
    ff = Scheduler(tiny4, policy="first-fit")
    fragment(ff)
    ff.submit(Job("g", gpus=8, submit_s=0, duration_s=1000), 0)
    (start,) = ff.schedule(0)
    assert len({i // 4 for i in start.gpu_ids}) == 8  # eight nodes, two leaves in different spine blocks
    assert start.speed_factor < 0.95
    assert ff.expected_end_s("g") == pytest.approx(1000 / start.speed_factor)
    assert ff.effective_gpus == pytest.approx(8 * start.speed_factor)

    tb = Scheduler(tiny4, policy="topo-bestfit")
    fragment(tb)
    tb.submit(Job("g", gpus=8, submit_s=0, duration_s=1000), 0)
    (best,) = tb.schedule(0)
    assert len({i // 4 for i in best.gpu_ids}) == 2 and best.speed_factor == pytest.approx(1.0)
    assert tb.expected_end_s("g") == pytest.approx(1000)


def test_factor_is_one_for_single_gpu_and_monotone_in_spread(tiny4):
    m = SpeedModel(tiny4)
    best = list(range(8))  # two whole nodes in leaf 0
    assert m.factor([5], [0]) == 1.0
    same_leaf = [0, 1, 4, 5, 8, 9, 12, 13]  # four nodes, one leaf
    two_spines = [0, 1, 4, 5, 32, 33, 36, 37]  # four nodes, two spine blocks
    assert m.factor(best, best) == pytest.approx(1.0)
    assert m.factor(two_spines, best) <= m.factor(same_leaf, best) <= 1.0
