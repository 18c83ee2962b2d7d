"""A TP collective hides at most under the GEMM it overlaps (exposure.tp_exposed_gemm_bound,
Options.tp_overlap_gemm_bound): closed form, and the estimator's use of it."""

import dataclasses

import pytest

from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options, tp_exposed_gemm_bound
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model


def test_long_gemms_leave_the_overlap_fraction_short_ones_their_excess():
    raw = 4.0  # four collectives of 1.0 s each
    # every GEMM outlasts its collective: only the (1 - overlap) share is exposed
    assert tp_exposed_gemm_bound(raw, 0.75, (2.0, 2.0, 2.0, 2.0)) == pytest.approx((1.0, 1.0))
    # a 0.5 s GEMM under a 1.0 s collective leaves 0.5 forward; backward (2 x 0.5) hides it all but 0.25
    fwd, bwd = tp_exposed_gemm_bound(raw, 0.75, (0.5, 2.0, 2.0, 2.0))
    assert fwd == pytest.approx(0.5 + 3 * 0.25) and bwd == pytest.approx(4 * 0.25)
    # no overlap: the bound changes nothing
    assert tp_exposed_gemm_bound(raw, 0.0, (0.1, 0.1, 0.1, 0.1)) == pytest.approx((4.0, 4.0))


def test_bound_slows_only_layers_whose_gemms_are_shorter_than_their_collectives():
    rows = {r["id"]: r for r in load_rows("mindspeed_ascend")}

    def ratio(row_id):
        row = rows[row_id]
        lay, _ = row_layout(row)
        opts = framework_options(row, lay)
        model, cluster = row_model(row), row_cluster(row)
        bounded = estimate(model, cluster, lay, options=opts).step_time_s
        free = estimate(model, cluster, lay, options=dataclasses.replace(opts, tp_overlap_gemm_bound=False)).step_time_s
        return bounded / free

    # Llama 3 8B at tp 8: QKV and output-projection GEMMs shorter than their 134 MB collectives
    assert ratio("mindspeed_ascend_llama3-8b_8npu") > 1.02
    # Llama 2 7B at tp 1: no TP collectives, nothing to bound
    assert ratio("mindspeed_ascend_llama2-7b_8npu") == pytest.approx(1.0)


def test_bad_bound_flag_is_refused():
    from wanka.errors import SpecError

    with pytest.raises(SpecError, match="options.tp_overlap_gemm_bound"):
        Options(tp_overlap_gemm_bound="sometimes")
