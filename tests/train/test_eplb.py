"""EPLB-style placement: replicas go to the hottest experts, packing evens out the EP ranks."""

import pytest
import torch

from wanka.errors import SpecError
from wanka.train.eplb import balanced_placement, rebalance, replica_counts
from wanka.train.experts import Placement, imbalance


def test_replicas_go_to_the_highest_load_per_replica():
    load = torch.tensor([90.0, 35.0, 20.0, 10.0])
    assert replica_counts(load, 4) == [1, 1, 1, 1]
    assert replica_counts(load, 6) == [3, 1, 1, 1]  # 90 -> 45 per replica, still above 35 -> 30
    assert replica_counts(load, 7) == [3, 2, 1, 1]  # now 35 is the highest load per replica


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
