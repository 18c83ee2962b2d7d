"""EPLB-style placement: replicas go to the hottest experts, packing evens out the EP ranks."""

import pytest
import torch

from wanka.errors import SpecError
from wanka.train.eplb import balanced_placement, rebalance, replica_counts
from wanka.train.experts import Placement, imbalance


def test_replicas_go_to_the_highest_load_per_replica():
    load = torch.tensor([90.0, 35.0, 20.0, 10.0])
    assert replica_counts(load, 4, ep=4) == [1, 1, 1, 1]
    assert replica_counts(load, 6, ep=4) == [3, 1, 1, 1]  # 90 -> 45 per replica, still above 35 -> 30
    assert replica_counts(load, 7, ep=4) == [3, 2, 1, 1]  # now 35 is the highest load per replica
    # at most one replica per EP rank: with ep 2 the hot expert stops at 2 and the next slot moves on
    assert replica_counts(load, 6, ep=2) == [2, 2, 1, 1]


def test_one_hot_expert_with_more_spare_slots_than_ranks_still_places():
    """A single very hot expert used to take every spare slot (3 replicas on 2 ranks) and the packing
    raised; the replicas are capped at ep and every rank gets slots/ep distinct experts."""
    load = torch.tensor([1000.0, 3.0, 2.0, 1.0])
    out = balanced_placement(load, 2, redundant=2)
    assert all(len(r) == 3 and len(set(r)) == 3 for r in out.ranks)
    assert all(0 in r for r in out.ranks)  # the hot expert on both ranks
    assert set(e for r in out.ranks for e in r) == set(range(4))


def test_packing_that_dead_ends_is_repaired_by_a_swap():
    """If greedy packing left an expert's last replica with room only on ranks that already hold it, a
    full rank lacking it gives its lightest expert that the roomy rank lacks to that rank and takes e."""
    from wanka.train.eplb import _swap_for

    ranks, weight = [[0, 1], [0], [2, 3]], [30.0, 20.0, 7.0]  # per_rank 2: only rank 1 has room, and holds 0
    load_of = {0: 20.0, 1: 10.0, 2: 5.0, 3: 2.0}
    q = _swap_for(ranks, weight, load_of, 0, per_rank=2)
    assert q == 2 and ranks == [[0, 1], [0, 3], [2]] and weight == [30.0, 22.0, 5.0]
    ranks[q].append(0)
    assert all(len(r) == 2 and len(set(r)) == 2 for r in ranks)


def test_skewed_zipf_loads_come_within_ten_percent():
    gen = torch.Generator().manual_seed(0)
    experts, ep = 16, 4
    ranks = torch.randperm(experts, generator=gen) + 1
    load = 1000.0 / ranks.double() ** 1.2  # Zipf(1.2) over a random expert order
    naive = imbalance(load[None], Placement.contiguous(experts, ep))
    packed = imbalance(load[None], balanced_placement(load, ep))
    replicated = balanced_placement(load, ep, redundant=4)
    assert naive > 1.3  # the skew is real
    assert packed < naive
    assert imbalance(load[None], replicated) <= 1.10
    assert all(len(r) == 5 and len(set(r)) == 5 for r in replicated.ranks)  # 20 slots, no expert twice on a rank
    assert set(e for r in replicated.ranks for e in r) == set(range(experts))


def test_uniform_load_keeps_every_rank_equal_and_layers_are_independent():
    load = torch.stack([torch.full((8,), 5.0), torch.tensor([40.0, 1, 1, 1, 1, 1, 1, 1])])
    out = rebalance(load, 2)
    assert imbalance(load[:1], out[0]) == 1.0
    assert 0 in out[1].ranks[0] or 0 in out[1].ranks[1]
    hot_rank = 0 if 0 in out[1].ranks[0] else 1
    assert len(out[1].ranks[hot_rank]) == 4  # every rank holds experts/ep experts


def test_bad_redundancy_is_refused():
    with pytest.raises(SpecError, match="moe-redundant-experts"):
        balanced_placement(torch.ones(4), 2, redundant=1)  # 5 slots on 2 ranks
    with pytest.raises(SpecError, match="moe-redundant-experts"):
        balanced_placement(torch.ones(4), 2, redundant=6)  # more replicas than ranks
