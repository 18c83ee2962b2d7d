"""Hierarchical MoE dispatch and node-limited routing (plan/hier_dispatch.py): the expected distinct
nodes per token against a sampled router, and DeepEP/HybridEP's network bytes against the flat
all-to-all's on a published row."""

import dataclasses

import numpy as np
import pytest

from wanka.comm import group_for_stride
from wanka.plan.exposure import ep_layer_comm_s
from wanka.plan.hier_dispatch import expected_distinct_units, flex_dispatch_of_row, hierarchical_ep_layer_comm_s
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model


def _sampled_distinct(top_k, experts, units, groups, group_topk, tokens=20000, seed=0):
    """Uniform routing as the module states it: group_topk groups uniformly, then top_k experts
    uniformly among the selected groups' experts (random scores, Megatron-Core group_limited_topk)."""
    rng = np.random.default_rng(seed)
    scores = rng.random((tokens, experts))
    group_scores = rng.random((tokens, groups))
    keep = np.argsort(-group_scores, axis=1)[:, :group_topk]
    mask = np.full((tokens, groups), -np.inf)
    np.put_along_axis(mask, keep, 0.0, axis=1)
    top = np.argsort(-(scores + np.repeat(mask, experts // groups, axis=1)), axis=1)[:, :top_k]
    unit = top // (experts // units)
    return float(np.mean([len(set(r)) for r in unit]))


@pytest.mark.parametrize("top_k,experts,units,groups,group_topk", [
    (8, 256, 4, 8, 4),    # DeepSeek-V3, EP 32 on 8-GPU nodes: two router groups per node
    (8, 256, 8, 8, 4),    # EP 64: one group per node
    (8, 256, 32, 8, 4),   # units = EP ranks: a group spans 4 ranks
    (8, 128, 2, 1, 1),    # Qwen3-30B-A3B, EP 16: no node limit
    (4, 32, 4, 1, 1),
    (8, 64, 8, 1, 1),     # the HybridEP benchmark (README_Hybrid-EP.md): 8 ranks x 8 local experts, top-8
    (8, 256, 32, 1, 1),   # ... and its 32 ranks
])
def test_closed_form_matches_a_sampled_router(top_k, experts, units, groups, group_topk):
    got = expected_distinct_units(top_k, experts, units, groups, group_topk)
    assert got == pytest.approx(_sampled_distinct(top_k, experts, units, groups, group_topk), rel=0.01)
    assert got <= min(top_k, units) + 1e-9
    if groups > 1 and groups % units == 0:
        assert got <= group_topk + 1e-9  # at most M nodes when a node holds whole groups


def test_node_limit_lowers_the_count_and_degenerates_without_groups():
    assert expected_distinct_units(8, 256, 8, 8, 4) < expected_distinct_units(8, 256, 8)
    assert expected_distinct_units(8, 256, 8, 8, 8) == pytest.approx(expected_distinct_units(8, 256, 8))
    assert expected_distinct_units(8, 256, 1) == 1.0


def test_row_fields():
    kw = flex_dispatch_of_row({"moe_token_dispatcher": "flex (hybridep)", "moe_router_num_groups": 8,
                               "moe_router_group_topk": 4})
    assert kw == {"moe_flex_backend": "hybridep", "moe_router_groups": (8, 4)}
    assert flex_dispatch_of_row({"moe_token_dispatcher": "alltoall"}) == {}


def test_deepseek_v3_b200_ep32_sends_each_token_once_per_node():
    """B200 EP 32 = 4 nodes: the network leg carries ~2.9 node copies per token, the flat all-to-all
    top_k x 28/32 = 7 -- the hierarchical exchange must be cheaper, by at most that ratio."""
    row = {r["id"]: r for r in load_rows("nemo_perf")}["nemo_deepseekv3_b200_256gpu_mxfp8_26.04.01"]
    cluster, (lay, _) = row_cluster(row), row_layout(row)
    model = row_model(row)
    lay = lay.resolve(cluster.gpus, model)
    size, stride = lay.group("ep")
    assert group_for_stride(cluster, size, stride).units_used()[0] == 4
    opts = framework_options(row, lay)
    assert (opts.moe_flex_backend, opts.moe_router_groups) == ("deepep", (8, 4))  # validate prices it so (v0.4.2 preset)
    tokens, h, elem = 4096, model.hidden, 2
    flat = ep_layer_comm_s(cluster, lay, tokens * model.moe.top_k * h * elem, dataclasses.replace(opts, ep_overlap=0.0))
    hier = hierarchical_ep_layer_comm_s(cluster, lay, tokens, h, elem, model.moe, 1.0, (8, 4), "auto")
    ratio = (8 * 28 / 32) / expected_distinct_units(8, 256, 4, 8, 4)
    assert flat / ratio * 0.8 < hier < flat
