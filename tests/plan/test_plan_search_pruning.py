"""The search's pruning and memoisation do not change its answer: its top layouts are those of
pricing every candidate that fits (brute force, caches emptied), less only the dominated twins the
search skips (docs/plan.md "Search"), each of which a returned layout at least as fast dominates."""

import pytest

from wanka.cluster import load_cluster
from wanka.plan import estimate, search
from wanka.plan.memo import clear_all_memos
from wanka.plan.memory import fits, memory_per_gpu
from wanka.plan.search import RECOMPUTE, candidate_layouts
from wanka.workload import load_model

TOP = 12


def _base(lay):
    return (lay.tp, lay.pp, lay.dp, lay.cp, lay.ep, lay.etp, lay.vpp, lay.mbs, lay.gbs)


def _dominates(winner, loser) -> bool:
    """`winner` is what the search keeps in place of `loser`: a lighter (or equal) recompute at the
    same ZeRO stage, or the ZeRO-1 twin of a ZeRO-2 layout."""
    if _base(winner.layout) != _base(loser.layout):
        return False
    lighter = RECOMPUTE.index(winner.layout.recompute) <= RECOMPUTE.index(loser.layout.recompute)
    same_or_zero1 = winner.layout.zero == loser.layout.zero or (winner.layout.zero, loser.layout.zero) == (1, 2)
    return lighter and same_or_zero1 and winner.tokens_per_s >= loser.tokens_per_s


@pytest.mark.parametrize("model, gpus, gbs", [("llama3-8b", 32, 128), ("mixtral-8x7b", 16, 32)])
def test_search_top_is_brute_force_less_dominated_twins(model, gpus, gbs):
    m, c = load_model(model), load_cluster("meta-24k-h100", gpus=gpus)
    top = search(m, c, gbs=gbs, top=TOP)
    assert len(top) == TOP
    clear_all_memos()
    every = [estimate(m, c, lay) for lay in candidate_layouts(m, c, gbs, m.seq_len)
             if fits(memory_per_gpu(m, lay, m.seq_len), c.gpu.hbm_GB)]
    priced = {str(e.layout): e for e in every}
    for e in top:  # the same prices as computed from empty caches in another order
        assert priced[str(e.layout)].tokens_per_s == e.tokens_per_s
        assert priced[str(e.layout)].memory == e.memory
    assert top[0].tokens_per_s == max(e.tokens_per_s for e in every)
    kept = {str(e.layout) for e in top}
    missing = [e for e in every if e.tokens_per_s > top[-1].tokens_per_s and str(e.layout) not in kept]
    for e in missing:
        assert any(_dominates(w, e) for w in top), e.layout
    if model == "mixtral-8x7b":  # etp is among the searched dimensions and reaches the top
        assert {e.layout.etp for e in every} == {None, 1}
