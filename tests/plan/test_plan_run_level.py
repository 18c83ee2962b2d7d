"""Run-level rows (plan/run_level.py) and the expected goodput they are priced with
(reliability/goodput.py): recognition by content and a whole run priced end to end (docs/plan.md "Run-level rows"). The goodput's closed form is tested in
tests/reliability/test_goodput.py."""

import copy
import json

import pytest

from wanka.plan.published import load_rows, row_model
from wanka.plan.row_check import check_row
from wanka.plan.validate_summary import summary
from wanka.plan.run_level import run_level_reason, run_level_tokens_per_gpu
from wanka.reliability.goodput import DETECT_S, RESTART_S
from wanka.workload.params import param_counts


def _bloom():
    return copy.deepcopy(next(r for r in load_rows("run_level") if r["id"] == "bloom_176b_384gpu_whole_run"))


def test_a_row_with_only_whole_run_totals_is_run_level():
    row = _bloom()
    assert not row["id"].endswith("_runlevel")
    assert run_level_reason(row) == "run-level (whole-run totals only)"
    assert run_level_tokens_per_gpu(row) == pytest.approx(366e9 / (1_082_990 * 3600))


def test_training_days_with_a_step_measurement_stay_steady_state():
    """SC'21 Table 2: training days projected from a measured iteration time are not a run average."""
    row = next(r for r in load_rows("calibration") if r["id"] == "sc21_t2_ptdp_174.6B_1536gpu")
    assert row["result"]["training_days"] and row["result"]["iteration_time_s"]
    assert run_level_reason(row) is None and check_row(row).basis != "run-level"


def test_days_instead_of_gpu_hours_and_notes_that_say_so():
    row = _bloom()
    row["result"].update(gpu_hours=None, training_days=100.0)
    assert run_level_tokens_per_gpu(row) == pytest.approx(366e9 / (384 * 100 * 86400))
    row = _bloom()
    row["result"].update(tokens_per_sec_per_gpu=93.9)  # a per-GPU figure derived from the totals ...
    row["notes"] = "tokens/s averaged over the whole run, restarts included"  # ... and said to be so
    assert "notes" in run_level_reason(row)
    row["notes"] = "93.9 = 366B training tokens / total GPU-hours x 3600"
    assert "notes" in run_level_reason(row)
    row["notes"] = "steady state at step 85376"
    assert run_level_reason(row) is None


def test_a_whole_run_is_priced_as_steady_state_times_goodput():
    c = check_row(_bloom())
    assert c.basis == "run-level" and not c.skipped
    assert c.measured == pytest.approx(93.87, abs=0.01)
    assert c.predicted == pytest.approx(c.predicted_steady_state * c.goodput)
    assert c.error == pytest.approx(c.predicted / c.measured - 1)
    d = c.goodput_detail
    assert d["failure_model"] == "opt-175b"  # a 2022 run: the manual-restart era
    # the model's parameters x 14 bytes (16-bit weights + fp32 master, Adam m, v) over 20 Gb/s
    params = param_counts(row_model(_bloom())).total
    assert 170e9 < params < 185e9  # 176B; the row mapping does not tie the 250k-token embedding
    assert d["checkpoint_s"] == pytest.approx(params * 14 / 2.5e9, abs=0.1)
    assert d["recovery_s"] > d["checkpoint_s"] + DETECT_S + RESTART_S
    assert "run-level (whole-run totals only)" in c.assumed and any("goodput" in a for a in c.assumed)
    assert "opt-175b" in d["inputs"]
    later = _bloom()
    later["parallelism"]["framework"] = "Megatron-DeepSpeed, 2024"
    c2 = check_row(later)
    assert c2.goodput_detail["failure_model"] == "rsc1" and c2.goodput > c.goodput  # automated, faster storage
    assert c2.predicted_steady_state == pytest.approx(c.predicted_steady_state, rel=0.05)


def test_run_level_set_median_and_cli_json(capsys):
    from wanka.cli import main

    checks = [check_row(r) for r in load_rows("run_level")]
    s = summary(checks)
    assert s["compared"] == 0 and s["run_level"]["compared"] == 3
    assert s["run_level"]["median_abs_error"] <= 0.105  # 10.0% (steady state alone: 18.0%)
    glm = next(c for c in checks if c.id == "glm_130b_768gpu_whole_run")  # training days, not GPU-hours
    assert glm.measured == pytest.approx(400e9 / (768 * 60 * 86400)) and glm.goodput < 0.9
    assert main(["plan", "validate", "--runs", "run_level", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"predicted_steady_state", "goodput", "goodput_detail"} <= set(payload["rows"][0])
    assert payload["summary"]["run_level"]["compared"] == 3
