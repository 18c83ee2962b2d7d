"""MoE mechanisms (plan/moe_cost.py): the balanced-router floor of routing imbalance against a
sampled multinomial, and the routed tokens' tensor-parallel traffic against its closed form."""

import numpy as np
import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.plan.moe_cost import balanced_router_imbalance
from wanka.workload import load_model


@pytest.mark.parametrize("copies,ep", [(4096, 8), (32768, 8), (65536, 64), (2048, 32)])
def test_balanced_router_floor_matches_a_sampled_multinomial(copies, ep):
    rng = np.random.default_rng(0)
    loads = rng.multinomial(copies, [1.0 / ep] * ep, size=4000)  # 4000 micro-batches
    sampled = float(np.mean(loads.max(axis=1)) / (copies / ep))
    # the excess over the mean within 7% (the Gaussian closed form misses the binomial's small skew)
    assert balanced_router_imbalance(copies, ep) - 1 == pytest.approx(sampled - 1, rel=0.07)
    assert balanced_router_imbalance(copies, 1) == 1.0


@pytest.fixture(scope="module")
def mixtral():
    return load_model("mixtral-8x7b"), load_cluster("meta-24k-h100", gpus=64)


def test_tp_split_experts_move_top_k_times_the_tokens(mixtral):
    m, c = mixtral  # every layer MoE, top-2, no shared experts
    split = estimate(m, c, Layout.parse("tp=4,ep=4,gbs=64"))  # etp = tp: routed tokens gathered over TP
    whole = estimate(m, c, Layout.parse("tp=4,ep=4,etp=1,gbs=64"))  # etp = 1: attention's TP traffic only
    # per layer: attention (1 unit) + MLP (top_k units, or none) of all-gather + reduce-scatter
    assert split.breakdown["tp_comm"] / whole.breakdown["tp_comm"] == pytest.approx(1 + m.moe.top_k, rel=1e-9)


def test_imbalance_slows_the_experts_not_the_flops(mixtral):
    m, c = mixtral
    lay = Layout.parse("tp=2,ep=8,gbs=64")
    even = estimate(m, c, lay, options=Options(moe_imbalance=1.0))
    skew = estimate(m, c, lay, options=Options(moe_imbalance=1.5))
    floor = estimate(m, c, lay)
    assert even.step_time_s < floor.step_time_s < skew.step_time_s
    assert skew.breakdown["ep_comm"] > even.breakdown["ep_comm"]
    # executed FLOPs (hfu x step) are the mean rank's: the same
    assert skew.hfu * skew.step_time_s == pytest.approx(even.hfu * even.step_time_s, rel=1e-9)


@pytest.mark.parametrize("field,value", [("moe_imbalance", 0.5), ("moe_imbalance", float("nan")),
                                         ("moe_dispatch_bytes", 3), ("grad_sync", "sometimes")])
def test_bad_mechanism_options_are_one_line_spec_errors(mixtral, field, value):
    from wanka.errors import SpecError

    m, c = mixtral
    with pytest.raises(SpecError) as exc:
        estimate(m, c, Layout.parse("tp=2,ep=8,gbs=64"), options=Options(**{field: value}))
    assert exc.value.field == f"options.{field}"


def test_capacity_factor_pads_every_expert_to_capacity(mixtral):
    m, c = mixtral
    lay = Layout.parse("tp=2,ep=8,gbs=64")
    padded = estimate(m, c, lay, options=Options(moe_capacity_factor=1.25))
    # Switch Transformer s.2.2: buffers of capacity_factor x the mean load, whatever the routing
    assert padded.step_time_s == pytest.approx(estimate(m, c, lay, options=Options(moe_imbalance=1.25)).step_time_s)
    assert padded.step_time_s == pytest.approx(
        estimate(m, c, lay, options=Options(moe_capacity_factor=1.25, moe_imbalance=3.0)).step_time_s)
    assert estimate(m, c, lay, options=Options(moe_capacity_factor=2.0)).step_time_s > padded.step_time_s


@pytest.mark.parametrize("overlap", [0.0, 0.5, 0.8])
def test_tp_overlap_hides_the_attention_not_the_routed_tokens_collectives(mixtral, overlap):
    """The routed copies' expert-TP all-gather/reduce-scatter are plain collectives in Megatron-Core's
    all-to-all dispatcher (moe_cost.moe_layer_tp_comm_s): TE userbuffers hide only the attention's pair.
    Per layer: whole (etp = 1) = a (1 - f); split (etp = tp) = a (1 - f) + top_k a, a = one raw pair."""
    m, c = mixtral
    opts = Options(tp_overlap=overlap)
    split = estimate(m, c, Layout.parse("tp=4,ep=4,gbs=64"), options=opts)
    whole = estimate(m, c, Layout.parse("tp=4,ep=4,etp=1,gbs=64"), options=opts)
    ratio = split.breakdown["tp_comm"] / whole.breakdown["tp_comm"]
    assert ratio == pytest.approx(1 + m.moe.top_k / (1 - overlap), rel=1e-9)


def test_shared_expert_overlap_hides_each_all_to_all_under_its_gemm():
    """Closed form (moe_cost.shared_expert_overlap_ep_s): dispatch beside the shared up GEMM, combine
    beside the down GEMM, max(0, a2a - G) each; backward GEMMs twice as long."""
    from wanka.plan.moe_cost import shared_expert_overlap_ep_s

    assert shared_expert_overlap_ep_s(10.0, (3.0, 1.0)) == pytest.approx((2.0 + 4.0, 0.0 + 3.0))
    assert shared_expert_overlap_ep_s(10.0, (6.0, 6.0)) == (0.0, 0.0)
    assert shared_expert_overlap_ep_s(10.0, ()) == (10.0, 10.0)  # no shared experts: nothing beside them


def test_shared_expert_overlap_in_a_step_removes_only_what_its_gemms_cover():
    m, c = load_model("deepseek-v3"), load_cluster("meta-24k-h100", gpus=1024)
    lay = Layout.parse("tp=2,pp=16,ep=64,etp=1,gbs=8192")
    plain = estimate(m, c, lay)
    over = estimate(m, c, lay, options=Options(moe_shared_expert_overlap=True))
    saved = plain.breakdown["ep_comm"] - over.breakdown["ep_comm"]
    assert 0 < saved < plain.breakdown["ep_comm"]  # one 2,048-wide shared expert hides part of 8-node all-to-alls
    m_, pp = plain.layout.microbatches, plain.layout.pp  # the 1F1B fill and flush save it too
    assert plain.step_time_s - over.step_time_s == pytest.approx(saved * (m_ + pp - 1) / m_, rel=0.02)
    assert over.breakdown["compute"] == pytest.approx(plain.breakdown["compute"], rel=1e-9)
