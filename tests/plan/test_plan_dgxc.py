"""NVIDIA's DGX Cloud benchmarking recipes (plan/published_runs/dgxc.json, 319 measured runs on
H100 and GB200 with their full configurations; sources per row, wanka/plan/published_runs/dgxc.md)
through `wanka plan validate`. These runs are outside the calibration table: only the Blackwell
GEMM efficiencies were set from them (Llama 3.1 405B on GB200, plan/efficiency.py)."""

import statistics

import pytest

from wanka.plan.published import load_rows
from wanka.plan.row_check import check_row
from priced_rows import priced_errors

ROWS = load_rows("dgxc")


def _errors(pred) -> list[float]:
    return priced_errors(ROWS, pred)


def _dense(row):
    return not row["architecture"].get("num_experts") and "proxy" not in row["model_name"]


def _framework(row, name):
    return row["parallelism"]["framework"].startswith(name)


@pytest.fixture(scope="module")
def summary():
    from wanka.plan.validate_summary import summary as summarise

    return summarise([check_row(r) for r in ROWS])


def test_every_row_is_priced_or_skipped_for_a_stated_reason(summary):
    assert summary["rows"] == len(ROWS) == 319
    assert summary["compared"] >= 310
    skipped = [check_row(r) for r in ROWS]
    assert all("ep" in c.skipped for c in skipped if c.skipped)  # expert parallelism across TP ranks (ETP < TP)
    assert summary["median_abs_error"] <= 0.065  # 4.5% (Dec 2026, measured NCCL all-to-all rate) + 2 points


def test_dense_h100_nemo_runs_within_8_percent():
    for precision in ("BF16", "FP8"):
        errs = _errors(lambda r: _dense(r) and "h100" in r["id"] and _framework(r, "NeMo")
                       and r["parallelism"]["precision"].startswith(precision))
        print(precision, len(errs), statistics.median(abs(e) for e in errs))
        assert len(errs) >= 80
        assert statistics.median(abs(e) for e in errs) <= 0.08


def test_gb200_check_model_is_within_5_percent():
    # Blackwell efficiencies were set on Llama 3.1 405B; Nemotron-4 340B on GB200 is the check
    errs = _errors(lambda r: r["model_name"].startswith("Nemotron-4 340B") and "gb200" in r["id"])
    assert len(errs) >= 12
    assert statistics.median(abs(e) for e in errs) <= 0.05


def test_paxml_gpt3_with_zero3_and_recompute():
    # JAX/Paxml GPT-3 175B: dp 512, FSDP-style sharding, full recompute (checkpoint policy)
    errs = _errors(lambda r: _framework(r, "Paxml") and "175B" in r["model_name"])
    assert len(errs) >= 5 and max(abs(e) for e in errs) <= 0.05


def test_jax_xla_family_median(summary):
    # MaxText and Paxml rows (profile jax-xla): 9.5% before MaxText's save_qkv_proj was priced as what it
    # recomputes (recompute module out_proj, docs/plan.md); 7.4% after
    fam = summary["by_family"]["jax-xla"]
    assert fam["compared"] >= 35
    assert fam["median_abs_error"] <= 0.078


def test_moe_runs_are_over_predicted_a_known_gap():
    """MoE recipes run slower than the planner says (routing, permutation, grouped GEMMs and FP8
    expert kernels are not priced beyond their bytes): a documented gap (docs/plan.md), kept here so
    a change in either direction is seen."""
    errs = _errors(lambda r: bool(r["architecture"].get("num_experts")) and "proxy" not in r["model_name"])
    print("MoE", len(errs), statistics.median(errs))
    assert len(errs) >= 30
    assert 0.0 < statistics.median(errs) <= 0.6


def test_moe_rows_run_what_their_configs_set():
    """Grok-1 24.12/dev: grok1_314b.yaml has no grouped GEMM and drops tokens at capacity 1.0
    (padded); DeepSeek-V3 NeMo 25.04: launch.sh's --recompute_modules and the performance script's
    token drop. Priced as such, each is slower than the same row without them (dgxc.md, Corrections)."""
    import dataclasses

    from wanka.plan.estimate import estimate
    from wanka.plan.published import framework_options, row_cluster, row_layout, row_model

    by_id = {r["id"]: r for r in ROWS}
    grok = by_id["dgxc_grok1-314b-proxy2L_h100_8gpu_bf16_24.12"]
    lay, _ = row_layout(grok)
    opts = framework_options(grok, lay)
    assert opts.moe_grouped_gemm is False and opts.moe_capacity_factor == 1.0 and opts.moe_dispatcher == "alltoall"
    model, cluster = row_model(grok), row_cluster(grok)
    as_run = estimate(model, cluster, lay, options=opts).tokens_per_s_per_gpu
    grouped = estimate(model, cluster, lay, options=dataclasses.replace(opts, moe_grouped_gemm=True)).tokens_per_s_per_gpu
    assert as_run < grouped
    for rid, module in (("dgxc_deepseek-v3-671b_h100_512gpu_bf16_25.04", "mla_up_proj"),
                        ("dgxc_deepseek-v3-671b_gb200_128gpu_bf16_25.04", "core_attn")):
        row = by_id[rid]
        lay, _ = row_layout(row)
        opts = framework_options(row, lay)
        assert lay.recompute == "selective" and opts.recompute_modules == (module,)
        assert opts.moe_capacity_factor == 1.0


def test_nemo_2_rows_overlap_their_interleaved_p2p_as_the_callback_sets_it():
    """NeMo 2.0's MegatronCommOverlapCallback sets overlap_p2p_comm whenever pp > 1 and vp > 1
    (megatron_comm_overlap.py at the commits dgxc's setup.sh pins): those rows say so and are priced with it;
    a launcher-era (NeMo 24.x) row with the same layout states nothing and keeps the profile's default."""
    from wanka.plan.published import framework_options, row_layout

    rows = {r["id"]: r for r in load_rows("dgxc")}
    for rid in ("dgxc_llama3.1-405b_h100_1024gpu_fp8_25.02", "dgxc_nemotron4-340b_gb200_256gpu_fp8_25.04_strong",
                "dgxc_llama4-maverick-400b_gb200_128gpu_bf16_25.04"):
        r = rows[rid]
        assert "overlap_p2p_comm=True" in r["parallelism"]["comm_overlap"], rid
        assert framework_options(r, row_layout(r)[0]).pp_p2p_overlap, rid
    old = rows["dgxc_llama3.1-405b_h100_576gpu_fp8_24.09"]
    assert row_layout(old)[0].vpp > 1 and not framework_options(old, row_layout(old)[0]).pp_p2p_overlap
