"""Prediction intervals from the validation residuals (wanka.plan.uncertainty, docs/plan.md
"Uncertainty"): coverage on the built-in sets, leave-one-out, the stored table is current."""

import json
import math

import pytest

from wanka.plan import uncertainty as U
from wanka.plan.published import built_in_runs, load_rows
from wanka.plan.row_check import check_row
from wanka.plan.validate_summary import summary


@pytest.fixture(scope="module")
def checks():
    return {name: [check_row(r) for r in load_rows(name)] for name in built_in_runs()}


@pytest.mark.parametrize("name", ["calibration", "dgxc", "torchtitan", "megatron_deepspeed"])
def test_p10_p90_cover_70_to_90_percent_of_every_built_in_set(checks, name):
    cov = summary(checks[name])["p10_p90_coverage"]
    assert cov is not None and 0.70 <= cov <= 0.90, cov


def test_every_compared_row_is_judged_and_covered_means_inside(checks):
    for rows in checks.values():
        for c in rows:
            if c.skipped or c.basis == "run-level":
                continue
            assert c.covered is not None and c.p10 < c.p90
            measured = {"MFU": c.mfu_measured, "HFU": c.hfu_measured}.get(c.basis, c.measured)
            assert c.covered == (c.p10 * (1 - 1e-9) <= measured <= c.p90 * (1 + 1e-9)), c.id


def test_a_built_in_row_is_judged_without_its_own_configuration(checks):
    differs = 0
    for c in checks["dgxc"]:
        if c.covered is None:
            continue
        held = U.interval(c.mechanism, c.group)
        rest = sorted(r["log_error"] for r in U.residual_rows() if r["group"] != c.group and r["class"] == held.mechanism)
        if held.mechanism == c.mechanism:  # its own class: the conformal order statistic of the others
            assert held.q_low == pytest.approx(rest[U.conformal_ranks(len(rest))[0]])
        full = U.interval(c.mechanism)
        differs += (held.q_low, held.q_high) != (full.q_low, full.q_high)
    assert differs > 0  # leaving a configuration out changes some intervals: coverage is not in-sample


def test_the_stored_residual_table_is_current(tmp_path, checks):
    """Fails after a mechanism change until `wanka plan validate --write-residuals` is rerun."""
    fresh = U.write_residuals(path=tmp_path / "r.json")
    U.residual_rows.cache_clear()  # write_residuals cleared the cache for its own path; reload the package's
    stored = json.loads(U.TABLE.read_text())["rows"]
    assert [(r["id"], r["class"]) for r in fresh["rows"]] == [(r["id"], r["class"]) for r in stored]
    assert [r["log_error"] for r in fresh["rows"]] == pytest.approx([r["log_error"] for r in stored], abs=1e-5)


def test_intervals_of_rate_and_step_time_are_the_same_band():
    iv = U.Interval("dense", 50, -0.1, 0.05)
    rate, step = iv.rate(1000.0), iv.duration(2.0)
    assert rate["p10"] * step["p90"] == pytest.approx(1000.0 * 2.0)
    assert rate["p90"] * step["p10"] == pytest.approx(1000.0 * 2.0)
    assert rate["p10"] == pytest.approx(1000 * math.exp(-0.05)) and iv.covers(1000.0, rate["p10"] * 1.001)
    assert not iv.covers(1000.0, rate["p90"] * 1.01)


def test_plan_json_carries_the_interval(run_json):
    d = run_json("plan", "--model", "llama3-70b", "--cluster", "wanka-10k", "--gpus", "1024", "--layout",
                 "tp=8,pp=4,gbs=512")
    band = d["uncertainty"]
    assert band["class"] == "dense" and band["residual_rows"] >= U.MIN_ROWS
    t, s = band["tokens_per_s_per_gpu"], band["step_time_s"]
    assert t["value"] == d["tokens_per_s_per_gpu"] and s["value"] == d["step_time_s"]
    assert t["p10"] < t["p90"] and s["p10"] < s["p90"]


def test_validate_json_reports_coverage(run_json):
    d = run_json("plan", "validate", "--runs", "calibration")
    assert 0 < d["summary"]["p10_p90_coverage"] < 1
    assert all("p10" in r and "covered" in r for r in d["rows"])


def test_conformal_ranks_are_the_split_conformal_order_statistics():
    # floor(0.1 (n+1)) and ceil(0.9 (n+1)), 1-based: n=9 -> 1st and 9th; n=19 -> 2nd and 18th
    assert U.conformal_ranks(9) == (0, 8) and U.conformal_ranks(19) == (1, 17) and U.conformal_ranks(99) == (9, 89)
    assert U.conformal_ranks(U.MIN_ROWS - 1)[1] >= U.MIN_ROWS - 1  # below MIN_ROWS the upper rank does not exist


def test_a_prediction_is_classed_by_its_framework_profile_and_mechanism():
    from wanka.layout import Layout
    from wanka.plan.exposure import Options
    from wanka.plan.frameworks import framework
    from wanka.workload import load_model

    m = load_model("llama3-8b")
    lay = Layout(tp=1, pp=1, dp=8, zero=3).resolve(8, m)
    assert U.mechanism_class(m, lay, framework("torchtitan").options(lay)) == "torchtitan/zero3-layer"
    assert U.mechanism_class(m, lay, Options()) == "zero3-layer"
    assert U.parents("torchtitan/zero3-layer") == ["torchtitan/zero3-layer", "torchtitan/", "zero3-layer", "all"]


def test_a_part_with_a_transferred_gemm_constant_is_judged_first_by_its_peers():
    """Gaudi and AMD parts take their GEMM constant from another part's in-step ratio (efficiency.transfer_efficiency):
    their class says so, and its parents put every such prediction before the anchored NVIDIA rows."""
    from wanka.hardware.catalog import gpu
    from wanka.layout import Layout
    from wanka.plan.frameworks import framework
    from wanka.workload import load_model

    m = load_model("llama3-8b")
    lay = Layout(tp=1, pp=1, dp=8).resolve(8, m)
    opts = framework("megatron-core").options(lay)
    assert U.mechanism_class(m, lay, opts, gpu("mi355x")) == "megatron-core/dense" + U.TRANSFERRED
    assert U.mechanism_class(m, lay, opts, gpu("gaudi2")).endswith(U.TRANSFERRED)
    assert U.mechanism_class(m, lay, opts, gpu("h100-sxm")) == "megatron-core/dense"
    assert U.parents("megatron-core/dense" + U.TRANSFERRED) == [
        "megatron-core/dense" + U.TRANSFERRED, "megatron-core/" + U.TRANSFERRED, U.TRANSFERRED, "dense", "all"]
    assert U.parents("dense" + U.TRANSFERRED) == ["dense" + U.TRANSFERRED, U.TRANSFERRED, "dense", "all"]
    # membership: a profile's transferred rows, then every transferred row; the NVIDIA rows of the same profile
    # are not peers; the mechanism across profiles takes both kinds
    t = "p/dense" + U.TRANSFERRED
    assert U._member(t, "p/" + U.TRANSFERRED) and not U._member("p/dense", "p/" + U.TRANSFERRED)
    assert not U._member("q/dense" + U.TRANSFERRED, "p/" + U.TRANSFERRED)
    assert U._member(t, U.TRANSFERRED) and not U._member("p/dense", U.TRANSFERRED)
    assert U._member(t, "dense") and U._member("p/dense", "dense")


def test_a_small_class_stretches_its_parents_band_over_its_own_residuals(monkeypatch):
    rows = [{"id": f"d{i}", "class": "p/dense", "group": f"g{i}", "log_error": (i - 10) / 100} for i in range(20)]
    rows += [{"id": f"s{i}", "class": "q/dense", "group": f"h{i}", "log_error": 0.30 + i / 100} for i in range(3)]
    monkeypatch.setattr(U, "residual_rows", lambda: tuple(rows))
    big = U.interval("p/dense")  # its own 20 rows: the 2nd and 19th (floor(2.1), ceil(18.9))
    assert big.mechanism == "p/dense" and (big.q_low, big.q_high) == (-0.09, 0.08)
    small = U.interval("q/dense", leave_out_group="h0")  # 2 rows left: the mechanism's 22 rows, stretched
    assert small.mechanism == "dense+q/dense" and small.rows == 22
    assert small.q_high == pytest.approx(0.32) and small.q_low == pytest.approx(-0.09)
