"""Megatron's unfused vocab-parallel cross-entropy (Options.megatron_unfused_ce, plan/compute.head_time)."""

import dataclasses

import pytest

from wanka.hardware.catalog import gpu as catalog_gpu
from wanka.plan import Options, estimate
from wanka.plan import efficiency as E
from wanka.plan.compute import head_time
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model
from wanka.workload import load_model


def test_unfused_loss_moves_52_bytes_per_logit_instead_of_24():
    m, gpu = load_model("gpt3-175b"), catalog_gpu("h100-sxm")
    fused = head_time(m, gpu, 1, 4096, 2, "bf16")
    unfused = head_time(m, gpu, 1, 4096, 2, "bf16", False, True)
    logits = 4096 * m.vocab / 2
    assert unfused.fwd_s - fused.fwd_s == pytest.approx((38 - 12) * logits / E.hbm_Bps(gpu))
    assert unfused.bwd_s - fused.bwd_s == pytest.approx((14 - 12) * logits / E.hbm_Bps(gpu))


def test_megatron_lms_own_runs_price_it_and_nemo_runs_do_not():
    rows = {r["id"]: r for r in load_rows("calibration")}
    own = rows["mcore_h100_weak_1.7B"]  # 'Megatron-Core r0.8.0', the Megatron-LM README's runs
    lay = row_layout(own)[0]
    assert framework_options(own, lay).megatron_unfused_ce
    nemo = next(r for r in load_rows("dgxc") if "nemo" in r["parallelism"]["framework"].lower())
    assert not framework_options(nemo, row_layout(nemo)[0]).megatron_unfused_ce
    # the large vocabulary (131,072) of a small model: the loss is a visible share of its step
    m, c = row_model(own), row_cluster(own)
    opts = framework_options(own, lay)
    with_it = estimate(m, c, lay, options=opts).step_time_s
    without = estimate(m, c, lay, options=dataclasses.replace(opts, megatron_unfused_ce=False)).step_time_s
    assert 1.03 < with_it / without < 1.15


def test_the_option_is_checked():
    from wanka.errors import SpecError

    with pytest.raises(SpecError, match="megatron_unfused_ce"):
        Options(megatron_unfused_ce=1)
