"""Every row of the built-in calibration set (plan/published_runs/calibration.json) through the estimator (docs/plan.md).

Rows without a tokens/s figure or without a full layout are skipped, counted and printed.
ZeRO-3 rows (SC'21 Table 2, DeepSpeed 2021) run with DeepSpeed's 2021 mechanisms and one stated
bandwidth hypothesis (plan_calibration_rows.zero3_2021_options; docs/plan.md "ZeRO-3"); they count
in the same statistics as every other row.
"""

import statistics

import pytest

from plan_calibration_rows import (load_rows, row_cluster, row_layout, row_model, row_options, runnable,
                         zero3_2021_options)
from wanka.plan import estimate
from wanka.plan.memory import memory_per_gpu

ROWS = load_rows()


def _predict(row):
    return estimate(row_model(row), row_cluster(row), row_layout(row), options=zero3_2021_options(row) or row_options(row))


def test_tokens_per_second_per_gpu_matches_published_runs():
    errors, skipped = {}, []
    for row in ROWS:
        if not runnable(row):
            skipped.append(row["id"])
            continue
        errors[row["id"]] = _predict(row).tokens_per_s_per_gpu / row["result"]["tokens_per_sec_per_gpu"] - 1
    for name, err in errors.items():
        print(f"{name:34s} {err:+.3f}")
    print(f"skipped {len(skipped)} rows without a tokens/s figure or layout: {', '.join(skipped)}")
    abs_err = [abs(e) for e in errors.values()]
    zero3 = [abs(e) for name, e in errors.items() if "zero3" in name]
    print(f"median |error| {statistics.median(abs_err):.3f}, max {max(abs_err):.3f} over {len(abs_err)} rows; "
          f"ZeRO-3 rows max {max(zero3):.3f}")
    assert len(errors) >= 30 and len(zero3) == 6
    assert statistics.median(abs_err) <= 0.10
    assert max(abs_err) <= 0.30


def test_zero3_rows_need_the_2021_mechanisms():
    """The DeepSpeed-2021 profile is what brings the ZeRO-3 rows in: FSDP-style defaults on
    topology-aware rings leave them far too fast, and no overlap at all far too slow."""
    import dataclasses

    rows = [r for r in ROWS if zero3_2021_options(r)]
    profile = zero3_2021_options(rows[0])

    def errors(opts):
        return [abs(estimate(row_model(r), row_cluster(r), row_layout(r), options=opts).tokens_per_s_per_gpu
                    / r["result"]["tokens_per_sec_per_gpu"] - 1) for r in rows]

    def worst(opts):
        return max(errors(opts))

    assert worst(profile) <= 0.15 and statistics.median(errors(profile)) <= 0.08
    # DeepSpeed's stage-3 defaults that bring them there (docs/plan.md "ZeRO-3"): reduce-scatters on
    # their own stream (overlap_comm) and the last weights kept from recompute to backward
    before = dataclasses.replace(profile, zero3_grad_overlap=False, zero3_reuse_distance=0.0)
    assert statistics.median(errors(before)) > statistics.median(errors(profile)) + 0.04
    assert worst(dataclasses.replace(profile, algorithm="auto")) > 1.0
    assert worst(dataclasses.replace(profile, dp_overlap=False)) > 0.30


@pytest.mark.parametrize("row", [r for r in ROWS if isinstance(r["result"].get("memory_per_gpu_GB"), dict)],
                         ids=lambda r: r["id"])
def test_memory_matches_korthikanti_figure_1(row):
    figure = row["result"]["memory_per_gpu_GB"]  # GiB as plotted, first pipeline stage
    model, lay = row_model(row), row_layout(row).resolve(row["hardware"]["gpu_count"])
    mem = memory_per_gpu(model, lay, model.seq_len, row_options(row).attention)
    assert mem.params_grads_optimizer_GiB == pytest.approx(figure["params_grads_optimizer"], rel=0.15)
    assert mem.activations_GiB == pytest.approx(figure["activations"], rel=0.15)
