"""ResolvedLayout's rank order (Megatron-Core RankGenerator, order tp-cp-ep-dp-pp): groups from
coordinates agree with the closed-form (size, stride), partition the ranks, and agree with the
runtime's device mesh (wanka.train.parallel_dims)."""

import pytest

from wanka.layout import Layout
from wanka.resolved_layout import GROUP_KINDS
from wanka.train.parallel_dims import ParallelDims
from wanka.workload.spec import parse_model_spec

LAYOUTS = [  # (layout, GPUs)
    ("tp=2,pp=2,cp=2,gbs=8", 16),
    ("tp=4,pp=2,ep=4,gbs=16", 32),  # ep over dp*cp, experts split like tp
    ("tp=4,cp=2,ep=8,etp=1,gbs=16", 32),  # ep folds over tp and cp ranks
    ("tp=2,ep=2,etp=2,cp=2,pp=2,gbs=8", 32),
    ("tp=2,pp=2,zero=3,dp_shard=2,gbs=8", 16),  # HSDP
    ("tp=2,zero=0,gbs=8", 8),
]


@pytest.mark.parametrize("text,gpus", LAYOUTS)
def test_groups_have_their_stride_and_partition_the_ranks(text, gpus):
    lay = Layout.parse(text).resolve(gpus)
    assert lay.world_size == gpus
    for kind in GROUP_KINDS:
        size, stride = lay.group(kind)
        seen = {}
        for r in range(gpus):
            members = lay.members(kind, r)
            assert len(members) == size, kind
            assert members == [members[0] + i * stride for i in range(size)], (kind, members, stride)
            assert r in members
            seen.setdefault(tuple(members), None)
        flat = [r for g in seen for r in g]
        assert sorted(flat) == list(range(gpus)), f"{kind}: every rank in exactly one group"


@pytest.mark.parametrize("text,gpus", LAYOUTS)
def test_dense_and_expert_orders_share_the_pipeline_groups(text, gpus):
    lay = Layout.parse(text).resolve(gpus)
    for r in range(gpus):  # Megatron-Core asserts the two generators' pp groups are equal
        assert lay.coords(r)["pp"] == lay.coords(r, expert=True)["pp"]
    assert lay.group("dp_cp")[0] * lay.tp == lay.group("expert_dp")[0] * lay.group("ep")[0] * lay.expert_tp


def test_sizes_the_layout_owns():
    lay = Layout.parse("tp=8,pp=4,cp=2,ep=8,etp=1,gbs=512").resolve(1024)
    assert (lay.dp, lay.microbatches, lay.expert_dp) == (16, 32, 32)
    assert lay.group("ep") == (8, 1) and lay.group("expert_dp") == (32, 8) and lay.group("pp") == (4, 256)
    hsdp = Layout.parse("tp=2,zero=3,dp_shard=4,gbs=16").resolve(32)
    assert (hsdp.dp_shard_size, hsdp.dp_replicas, hsdp.zero_shards[0]) == (4, 4, 4)
    assert hsdp.group("dp_replicate") == (4, 8)


@pytest.mark.parametrize("text,gpus", [("tp=2,pp=2,gbs=8", 8), ("tp=2,zero=3,dp_shard=2,gbs=8", 8),
                                       ("pp=2,zero=0,gbs=8", 8), ("tp=4,zero=3,gbs=4", 8)])
def test_runtime_mesh_agrees_with_the_rank_order(text, gpus):
    model = parse_model_spec({"name": "tiny", "layers": 4, "hidden": 64, "heads": 4, "ffn_hidden": 128,
                              "vocab": 128, "seq_len": 32}, "tiny")
    dims = ParallelDims.from_layout(text, gpus, model, cuda=False)
    lay = dims.layout
    for r in range(gpus):
        mesh, order = dims.coords(r), lay.coords(r)
        assert (mesh["tp"], mesh["dp_shard"], mesh["dp_replicate"], mesh["pp"]) == \
               (order["tp"], order["dp_shard"], order["dp_replicate"], order["pp"])
        assert dims.dp_rank(r) == order["dp_replicate"] * lay.dp_shard_size + order["dp_shard"]
