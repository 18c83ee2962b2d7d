"""Every row of shared/reference/calibration_runs.json through the estimator (docs/plan.md).

Rows without a tokens/s figure or without a full layout are skipped, counted and printed.
ZeRO-3 rows (SC'21 Table 2, DeepSpeed 2021) run under a stated hypothesis (plan_calibration_rows.py) and are
held to a looser bound; docs/plan.md explains why they disagree with NCCL-level physics.
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
    errors, zero3, skipped = {}, {}, []
    for row in ROWS:
        if not runnable(row):
            skipped.append(row["id"])
            continue
        err = _predict(row).tokens_per_s_per_gpu / row["result"]["tokens_per_sec_per_gpu"] - 1
        (zero3 if zero3_2021_options(row) else errors)[row["id"]] = err
    for name, err in {**errors, **zero3}.items():
        print(f"{name:34s} {err:+.3f}")
    print(f"skipped {len(skipped)} rows without a tokens/s figure or layout: {', '.join(skipped)}")
    abs_err = [abs(e) for e in errors.values()]
    print(f"median |error| {statistics.median(abs_err):.3f}, max {max(abs_err):.3f} over {len(abs_err)} rows; "
          f"ZeRO-3 rows max {max(abs(e) for e in zero3.values()):.3f}")
    assert len(errors) >= 20
    assert statistics.median(abs_err) <= 0.10
    assert max(abs_err) <= 0.30
    assert max(abs(e) for e in zero3.values()) <= 0.35


@pytest.mark.parametrize("row", [r for r in ROWS if isinstance(r["result"].get("memory_per_gpu_GB"), dict)],
                         ids=lambda r: r["id"])
def test_memory_matches_korthikanti_figure_1(row):
    figure = row["result"]["memory_per_gpu_GB"]  # GiB as plotted, first pipeline stage
    model, lay = row_model(row), row_layout(row).resolve(row["hardware"]["gpu_count"])
    mem = memory_per_gpu(model, lay, model.seq_len, row_options(row).attention)
    assert mem.params_grads_optimizer_GiB == pytest.approx(figure["params_grads_optimizer"], rel=0.15)
    assert mem.activations_GiB == pytest.approx(figure["activations"], rel=0.15)
