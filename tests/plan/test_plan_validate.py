"""`wanka plan validate`: published runs through the planner (wanka.plan.published)."""

import copy
import json

import pytest

from plan_calibration_rows import ROWS_PATH, load_rows
from wanka.plan.published import framework_options, row_cluster, row_layout, row_model
from wanka.plan.row_check import check_row



def test_validate_reports_every_row_of_the_calibration_file(run_cli):
    code, out, err = run_cli("plan", "validate", "--runs", str(ROWS_PATH), "--json")
    assert code == 0, err
    doc = json.loads(out)
    s = doc["summary"]
    assert s["rows"] == len(load_rows()) == len(doc["rows"])
    tokens = [r for r in doc["rows"] if r["basis"] == "tokens/s"]
    assert len(tokens) == 30  # the rows the calibration test holds to 10% / 30%
    # every compared row, the Megatron-Core H100 ones on MFU included (their FFN/mbs are assumed)
    # median 4.1% (Dec 2026, the interleaved fill's chunk ring: plan/interleaved.fill_flush_p2p_s) + 2 points
    assert s["compared"] == 39 and s["median_abs_error"] <= 0.062 and s["max_abs_error"] <= 0.30
    # DeepSpeed's 2021 ZeRO-3 rows with stage 3's own defaults (13.7% before; docs/plan.md "ZeRO-3")
    assert s["by_family"]["deepspeed"]["compared"] == 6 and s["by_family"]["deepspeed"]["median_abs_error"] <= 0.08
    assert s["by_family"]["megatron-lm"]["median_abs_error"] <= 0.025  # SC'21 / MLSys'23 PTD-P rows: 2.1%
    skipped = {r["id"]: r["skipped"] for r in doc["rows"] if r["skipped"]}
    assert "mcore_h100_strong_177B_96gpu" in skipped and "tp and pp" in skipped["mcore_h100_strong_177B_96gpu"]
    assert "global batch" in skipped["korthikanti_530B_2240gpu"]


def test_fail_above_turns_a_large_error_into_exit_1(run_cli):
    code, out, _ = run_cli("plan", "validate", "--runs", str(ROWS_PATH), "--fail-above", "0.01")
    assert code == 1
    assert "exceeds --fail-above 1.0%" in out
    code, _, _ = run_cli("plan", "validate", "--runs", str(ROWS_PATH), "--fail-above", "0.5")
    assert code == 0


@pytest.mark.parametrize("content, needle", [
    (None, "an existing JSON file"),
    ("{not json", "unreadable JSON"),
    ('{"runs": 3}', "a JSON list of run objects"),
])
def test_bad_runs_file_is_one_line_and_exit_2(run_cli, tmp_path, content, needle):
    path = tmp_path / "runs.json"
    if content is not None:
        path.write_text(content)
    code, out, err = run_cli("plan", "validate", "--runs", str(path))
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_a_directory_is_not_a_runs_file(run_cli, tmp_path):
    code, out, err = run_cli("plan", "validate", "--runs", str(tmp_path))
    assert code == 2 and out == "" and "readable JSON file" in err and len(err.strip().splitlines()) == 1


def test_bad_fail_above_is_exit_2(run_cli):
    code, _, err = run_cli("plan", "validate", "--runs", str(ROWS_PATH), "--fail-above", "-1")
    assert code == 2 and "--fail-above" in err


def _moe_row():
    """A synthetic Mixtral-shaped FP8 row on GB200 NVL72 with DualPipe (fields as in the JSON schema)."""
    row = copy.deepcopy(next(r for r in load_rows() if r["id"] == "korthikanti_175B_seqsel"))
    row["id"] = "synthetic_moe"
    row["architecture"].update(layers=32, hidden_size=4096, attention_heads=32, kv_heads=8, head_dim=128,
                               ffn_hidden_size=14336, ffn_activation="SwiGLU", vocab_size=32000, seq_len=4096,
                               num_experts=8, top_k=2, moe_ffn_hidden_size=14336, attention_type="GQA")
    row["hardware"].update(gpu="NVIDIA GB200 NVL72", gpu_count=144, nvlink_domain_size=72,
                           inter_node_bw_per_gpu_Gbps=800)
    row["parallelism"].update(tp=1, pp=4, dp=36, ep=4, cp=1, virtual_pipeline_chunks_per_rank=None,
                              sequence_parallel=False, micro_batch_size=1, global_batch_size_seqs=576,
                              precision="FP8 (E4M3 GEMMs)", recompute="none", zero_or_fsdp="distributed optimizer",
                              pipeline_schedule="DualPipe", framework="Megatron-Core 0.12")
    row["result"].update(tokens_per_sec_per_gpu=5000.0, tokens_per_sec_total=None, iteration_time_s=None,
                         tflops_per_gpu=None, mfu_pct=None, hfu_pct=None, memory_per_gpu_GB=None)
    return row


def test_a_moe_fp8_gb200_row_maps_field_by_field():
    row = _moe_row()
    m, c, (lay, _) = row_model(row), row_cluster(row), row_layout(row)
    assert (m.moe.experts, m.moe.top_k, m.kv_heads, m.activation) == (8, 2, 8, "swiglu")
    assert (c.gpu.name, c.gpus, c.gpus_per_node) == ("gb200", 144, 4)
    assert (lay.ep, lay.zero, lay.precision, lay.pp, lay.dp) == (4, 1, "fp8", 4, 36)
    opts = framework_options(row)
    assert opts.pipeline == "dualpipe" and opts.tp_overlap == 0.5
    check = check_row(row)
    assert check.skipped is None and check.basis == "tokens/s"
    assert check.error == pytest.approx(check.predicted / 5000.0 - 1)


def test_rows_the_planner_cannot_take_are_skipped_with_the_reason():
    tpu = copy.deepcopy(_moe_row())
    tpu["hardware"]["gpu"] = "Google TPU v4"
    assert "hardware.gpu" in check_row(tpu).skipped
    no_tp = copy.deepcopy(_moe_row())
    no_tp["parallelism"].update(tp=None, dp=None)  # with dp stated, tp would follow from the GPU count
    assert "tp and pp" in check_row(no_tp).skipped
    bad_ep = copy.deepcopy(_moe_row())
    bad_ep["parallelism"]["ep"] = 5
    assert check_row(bad_ep).skipped


def test_a_result_its_source_flags_is_priced_but_not_compared():
    row = copy.deepcopy(_moe_row())
    plain = check_row(row)
    row["result"]["source_caveat"] = "Performance regression  in this run is a known issue."
    flagged = check_row(row)
    assert flagged.skipped == "the source flags this result: Performance regression in this run is a known issue."
    assert flagged.predicted == pytest.approx(plain.predicted) and flagged.measured == pytest.approx(plain.measured)
    assert flagged.error is None and flagged.covered is None
    for bad in ("", "  ", 3, ["regression"]):
        row["result"]["source_caveat"] = bad
        assert check_row(row).skipped.startswith("result.source_caveat: expected")


def test_the_built_in_regression_row_is_skipped_with_nvidias_footnote():
    from wanka.plan.published import load_rows as built_in

    row = next(r for r in built_in("nemo_perf") if r["id"] == "nemo_gpt-oss-120b_gb200_64gpu_mxfp8_26.06.01")
    assert "[^gpt-oss-note]" in row["source_excerpt"]
    assert "known issue" in check_row(row).skipped


@pytest.mark.parametrize("text, stage", [("ZeRO stage 1", 1), ("DeepSpeed ZeRO-2", 2), ("FSDP (full shard)", 3),
                                         ("HSDP over 8 nodes", 3), ("FSDP SHARD_GRAD_OP", 2),
                                         ("distributed optimizer", 1), ("none (DDP)", 0), (None, 0)])
def test_zero_stage_from_free_text(text, stage):
    from wanka.plan.published import zero_stage

    assert zero_stage(text) == stage


def test_run_level_rows_are_priced_with_goodput_outside_the_steady_state_statistics():
    from wanka.plan.validate_summary import summary

    row = _moe_row()
    row["id"] = "synthetic_runlevel"
    row["result"].update(tokens_per_sec_per_gpu=None, training_tokens=1e12, gpu_hours=1e12 / 3600 / 2000.0)
    c = check_row(row)
    assert c.basis == "run-level" and c.measured == pytest.approx(2000.0)
    assert 0 < c.goodput < 1 and c.predicted == pytest.approx(c.predicted_steady_state * c.goodput)
    assert c.error == pytest.approx(c.predicted / 2000.0 - 1)
    steady = check_row(_moe_row())
    s = summary([c, steady])
    assert s["compared"] == 1 and s["max_abs_error"] == pytest.approx(abs(steady.error))
    assert s["run_level"] == {"compared": 1, "median_abs_error": pytest.approx(abs(c.error))}


def test_hfu_only_rows_compare_on_hfu():
    row = _moe_row()
    row["result"].update(tokens_per_sec_per_gpu=None, hfu_pct=50.0)
    c = check_row(row)
    assert c.basis == "HFU" and c.error == pytest.approx(c.hfu_predicted / 50.0 - 1)


@pytest.mark.parametrize("framework, attention, tp_overlap", [
    ("Megatron-LM (2021)", "unfused", 0.0), ("Megatron-Core r0.8.0", "flash", 0.5), ("NeMo 24.12", "flash", 0.5),
    ("MegaScale (2024)", "flash2", 0.8), ("torchtitan", "flash2", 0.0),
    ("MaxText (JAX)", "flash", 0.0)])
def test_framework_mechanisms_from_the_framework_field(framework, attention, tp_overlap):
    row = _moe_row()
    row["parallelism"].update(framework=framework, pipeline_schedule=None, comm_overlap=None)
    opts = framework_options(row)
    assert (opts.attention, opts.tp_overlap, opts.pipeline) == (attention, tp_overlap, "1f1b")


def test_hsdp_shard_group_is_read_from_the_zero_text():
    row = _moe_row()
    row["architecture"].update(num_experts=None, top_k=None, moe_ffn_hidden_size=None)
    row["parallelism"].update(ep=1, pp=1, dp=144, zero_or_fsdp="FSDP (MaxText FSDP=72 x DP=2)",
                              pipeline_schedule=None, global_batch_size_seqs=144)
    lay, _ = row_layout(row)
    assert (lay.zero, lay.dp_shard) == (3, 72)
    row["parallelism"]["zero_or_fsdp"] = "FSDP (full shard)"
    assert row_layout(row)[0].dp_shard is None


def test_json_summary_gives_median_and_p90_per_framework_family(run_cli):
    import statistics

    import numpy as np

    code, out, err = run_cli("plan", "validate", "--runs", "mindspeed_ascend", "--json")
    assert code == 0, err
    doc = json.loads(out)
    by_family: dict[str, list[float]] = {}
    for r in doc["rows"]:
        if r["error"] is not None and not r["skipped"]:
            by_family.setdefault(r["family"], []).append(abs(r["error"]))
    fams = doc["summary"]["by_family"]
    assert set(fams) == set(by_family) == {"mindspeed"}  # MindSpeed-LLM's own profile (plan/frameworks.py)
    for name, errs in by_family.items():
        assert fams[name]["compared"] == len(errs)
        assert fams[name]["median_abs_error"] == pytest.approx(statistics.median(errs))
        assert fams[name]["p90_abs_error"] == pytest.approx(float(np.quantile(errs, 0.9)))
    s = doc["summary"]
    assert s["median_abs_error"] <= s["p90_abs_error"] <= s["max_abs_error"]
