"""Expert tensor parallelism (Layout etp, Megatron-Core --expert-tensor-parallel-size)."""

import pytest

from wanka.cluster import load_cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan import estimate
from wanka.plan.memory import _stage_params
from wanka.workload import load_model


@pytest.fixture(scope="module")
def case():
    return load_model("mixtral-8x7b"), load_cluster("meta-24k-h100", gpus=64)


def test_etp_is_parsed_printed_and_checked(case):
    m, c = case
    lay = Layout.parse("tp=4,pp=1,ep=8,etp=1,gbs=64").resolve(c.gpus, m)
    assert (lay.ep, lay.etp, lay.expert_tp, lay.dp, lay.expert_dp) == (8, 1, 1, 16, 8)
    assert "etp=1" in str(lay) and "etp" not in str(Layout.parse("tp=4"))
    with pytest.raises(SpecError, match="etp"):
        Layout.parse("tp=4,ep=2,etp=3").resolve(c.gpus, m)  # etp must divide tp
    # without etp, an EP group wider than dp*cp (= 4 here) spans the TP ranks: etp 1 is inferred
    wide = Layout.parse("tp=4,pp=4,ep=8,gbs=64").resolve(c.gpus, m)
    assert (wide.dp, wide.etp, wide.expert_tp, wide.expert_dp) == (4, 1, 1, 2)
    with pytest.raises(SpecError, match="ep.*tp\\*cp\\*dp"):
        Layout.parse("tp=1,pp=16,ep=8,gbs=64").resolve(c.gpus, m)  # 8 does not divide tp*cp*dp = 4
    with pytest.raises(SpecError, match="ep\\*etp"):
        Layout.parse("tp=4,pp=4,ep=8,etp=4,gbs=64").resolve(c.gpus, m)  # 8 x 4 does not divide tp*cp*dp = 16


def test_expert_flops_per_gpu_do_not_depend_on_etp(case):
    m, c = case
    a = estimate(m, c, Layout.parse("tp=4,ep=4,gbs=64"))
    b = estimate(m, c, Layout.parse("tp=4,ep=4,etp=1,gbs=64"))
    # the same FLOPs per GPU (hfu x step), other GEMM shapes, groups and expert-DP traffic
    assert b.hfu * b.step_time_s == pytest.approx(a.hfu * a.step_time_s, rel=1e-9)
    assert b.breakdown["ep_comm"] < a.breakdown["ep_comm"]  # EP group inside the node (stride etp)
    assert b.breakdown["dp_comm"] > a.breakdown["dp_comm"]  # whole experts: 4x the expert gradients


def test_experts_not_split_by_tp_hold_tp_times_the_weights(case):
    m, c = case
    full = Layout.parse("tp=4,ep=4,gbs=64").resolve(c.gpus, m)
    one = Layout.parse("tp=4,ep=4,etp=1,gbs=64").resolve(c.gpus, m)
    assert _stage_params(m, one, 0)[1] == pytest.approx(4 * _stage_params(m, full, 0)[1])
    assert _stage_params(m, one, 0)[0] == pytest.approx(_stage_params(m, full, 0)[0])


def test_an_ep_group_across_tp_ranks_is_a_valid_layout_with_etp_1(case):
    m, c = case
    e = estimate(m, c, Layout.parse("tp=4,ep=8,etp=1,dp=4,pp=4,gbs=64"))  # ep 8 > dp*cp 4
    assert e.layout.expert_dp == 2 and e.step_time_s > 0 and e.breakdown["ep_comm"] > 0


def test_without_zero_the_expert_optimizer_step_is_not_sharded(case):
    # zero=0: every GPU updates all the experts it holds; etp=1 holds tp=4x the expert weights
    m, c = case
    full = estimate(m, c, Layout.parse("tp=4,ep=2,gbs=64,zero=0"))
    whole = estimate(m, c, Layout.parse("tp=4,ep=2,etp=1,gbs=64,zero=0"))
    e_full = _stage_params(m, full.layout, 0)[1]
    e_whole = _stage_params(m, whole.layout, 0)[1]
    assert e_whole == pytest.approx(4 * e_full)
    extra = whole.breakdown["optimizer"] - full.breakdown["optimizer"]
    per_param = full.breakdown["optimizer"] / sum(_stage_params(m, full.layout, 0))
    assert extra == pytest.approx(per_param * (e_whole - e_full), rel=1e-9)


def test_search_enumerates_whole_experts_across_the_tp_ranks(case):
    from wanka.plan.search import candidate_layouts, search

    m, c = case
    cands = list(candidate_layouts(m, c, 64, m.seq_len))
    wide = [lay for lay in cands if lay.etp == 1 and (lay.dp * lay.cp) % lay.ep]
    assert wide and all((lay.tp * lay.cp * lay.dp) % lay.ep == 0 for lay in wide)
    assert not any(lay.etp == 1 and lay.tp == 1 for lay in cands)  # etp 1 = etp omitted without TP
    best = search(m, c, gbs=64, top=50)
    assert {e.layout.etp for e in best} == {None, 1}  # both kinds priced and ranked together
