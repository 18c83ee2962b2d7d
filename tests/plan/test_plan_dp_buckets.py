"""Bucketed data-parallel overlap (plan/dp_schedule.bucketed_exposed_s, exposure.dp_comm): the last
reduce-scatter bucket starts when the backward ends, the first all-gather bucket before any compute."""

import pytest

from wanka.cluster import load_cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.dp_schedule import bucketed_exposed_s
from wanka.plan.exposure import Options, dp_comm
from wanka.plan.published import framework_options, load_rows


def test_one_bucket_is_always_exposed():
    # 10 buckets of 0.05 s under a 1 s backward: only the last one runs after it
    assert bucketed_exposed_s(0.5, 0.05, 1.0) == pytest.approx(0.05)
    # longer than the window: T - W (1 - 1/k), k = 4 -> 2 - 1 * 3/4
    assert bucketed_exposed_s(2.0, 0.5, 1.0) == pytest.approx(1.25)
    # a single bucket cannot overlap at all; unbucketed (0) is the old closed form
    assert bucketed_exposed_s(0.3, 0.3, 1.0) == pytest.approx(0.3)
    assert bucketed_exposed_s(0.3, 0.0, 1.0) == 0.0


def test_bucket_size_sets_the_bucket_collective():
    c = load_cluster("meta-24k-h100", gpus=256)
    lay = Layout.parse("tp=8,pp=1,gbs=256,zero=1").resolve(256)
    params = 8e9 / 8
    small = dp_comm(c, lay, params, 0.0, Options())  # Megatron default: max(40M, 1M x 32) = 40M
    big = dp_comm(c, lay, params, 0.0, Options(dp_bucket_params=500e6))
    assert big.grad_bucket_s > small.grad_bucket_s * 5  # 2 buckets instead of 25
    assert big.grad_s < small.grad_s  # fewer buckets pay fewer latencies
    assert big.param_bucket_s > 0 and small.param_bucket_s > 0
    with pytest.raises(SpecError, match="options.dp_bucket_params"):
        Options(dp_bucket_params=0)


def test_mlperf_rows_carry_their_configured_bucket():
    sizes = {}
    for r in load_rows("mlperf"):
        opts = framework_options(r)
        sizes[r["id"]] = opts.dp_bucket_params
    assert sizes["mlperf51_llama3.1-8b_72xgb200_tyche"] == 768e6  # BUCKET_SIZE in config_common_8b.sh
    assert sizes["mlperf51_llama3.1-8b_32xb200_uf_hpg"] == 134217728  # custom.yaml default
    assert sizes["mlperf50_llama3.1-405b_512xh100_eos_n64"] is None  # not stated: Megatron's default
