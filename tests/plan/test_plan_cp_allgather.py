"""Context parallelism as PyTorch's experimental context_parallel runs it with the "allgather"
rotate method (plan/cp_allgather.py; torchtitan's default)."""

import dataclasses

import pytest

from wanka.errors import SpecError
from wanka.plan.cp_allgather import allgather_cp_exposed_s
from wanka.plan.exposure import Options, _ct
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model
from wanka.plan.row_check import check_row

PRE = "torchtitan_llama3.1-"


def _row(suffix):
    return next(r for r in load_rows("torchtitan") if r["id"] == PRE + suffix)


def _resolved(row):
    lay = row_layout(row)[0]
    return lay.resolve(row_cluster(row).gpus, row_model(row))


def test_torchtitan_profile_gathers_expanded_kv():
    opts = framework_options(_row("8b_8gpu_fsdp1_cp8_seq262144"))
    assert opts.cp_rotate == "allgather" and opts.gqa_repeat_kv
    assert Options().cp_rotate == "ring" and not Options().gqa_repeat_kv  # other frameworks: unchanged


def test_step0_hides_the_gather_and_the_last_dkv_hop_is_exposed():
    """Closed form of the schedule in torch's _templated_ring_attention(_backward): the gather is
    hidden by the step-0 block only; each fp32 dK/dV hop by one backward block, the last by nothing;
    full recompute replays the forward's gather."""
    row = _row("405b_512gpu_tp8_pp8_fsdp1_cp8_seq262144")
    cluster, lay = row_cluster(row), _resolved(row)
    kv = 256e6
    size, stride = lay.group("cp")
    gather = _ct(cluster, "all_gather", lay.cp * kv, size, stride, "auto")
    dkv = _ct(cluster, "send_recv", 2 * kv, 2, stride * lay.cp // 2, "auto")
    assert gather > 0 and dkv > 0
    # attention so long that every block hides its transfer: only the last dK/dV hop is exposed
    assert allgather_cp_exposed_s(cluster, lay, kv, 1e3, False, "auto") == (0.0, pytest.approx(dkv))
    # no compute to hide under: everything is exposed, and recompute replays the forward gather
    fwd, bwd = allgather_cp_exposed_s(cluster, lay, kv, 0.0, False, "auto")
    assert fwd == pytest.approx(gather) and bwd == pytest.approx(gather + lay.cp * dkv)
    assert allgather_cp_exposed_s(cluster, lay, kv, 0.0, True, "auto")[1] == pytest.approx(gather + lay.cp * dkv + fwd)


def test_gather_across_nodes_costs_and_inside_nvlink_hides():
    """405B's CP ranks sit outside the TP node (stride 8): the gather of 8 ranks' expanded K/V over the
    network outlasts the step-0 block, and those rows slow down against the ring model; the 8B's CP
    ranks share one NVLink domain, where the gather hides (< 2% change)."""
    for suffix, lo, hi in (("405b_512gpu_tp8_pp8_fsdp1_cp8_seq262144", 0.05, 0.5),
                           ("8b_8gpu_fsdp1_cp8_seq262144", 0.0, 0.02)):
        row = _row(suffix)
        ring = dataclasses.replace(framework_options(row), cp_rotate="ring", gqa_repeat_kv=False)
        from wanka.plan.estimate import estimate

        base = estimate(row_model(row), row_cluster(row), _resolved(row), options=ring)
        slow = base.tokens_per_s_per_gpu / check_row(row).predicted - 1
        assert lo <= slow <= hi, (suffix, slow)


def test_cp_rotate_is_validated():
    with pytest.raises(SpecError, match="options.cp_rotate"):
        Options(cp_rotate="alltoall-ish")
    with pytest.raises(SpecError, match="options.gqa_repeat_kv"):
        Options(gqa_repeat_kv="yes")
