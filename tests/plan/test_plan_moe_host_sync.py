"""Which MoE runs block the host on the device once per layer (plan/moe_host_sync.py)."""

import json
from pathlib import Path

from wanka.cli import main
from wanka.plan.exposure import Options
from wanka.plan.moe_host_sync import SYNC_REASON, moe_host_sync, moe_host_sync_of_options, moe_host_sync_of_row
from wanka.workload import load_model

RUNS = Path(__file__).resolve().parents[2] / "src/wanka/plan/published_runs"


def _rows(name):
    return json.loads((RUNS / f"{name}.json").read_text())


def test_switches():
    assert moe_host_sync(1, "alltoall", None) is None  # dense
    assert moe_host_sync(128, None, None) == SYNC_REASON["alltoall"]  # NeMo's default dispatcher, dropless
    assert moe_host_sync(128, "deepep", None) == SYNC_REASON["deepep"]
    assert moe_host_sync(128, "hybridep", None) == SYNC_REASON["hybridep"]
    assert moe_host_sync(128, "hybridep", None, expert_rank_capacity_factor=1.5) is None
    assert moe_host_sync(8, "allgather", None) == SYNC_REASON["allgather"]
    assert moe_host_sync(64, "alltoall", 1.0) is None  # padded to capacity: counts are CPU constants
    assert moe_host_sync(64, "alltoall", 1.0, padded=False) == SYNC_REASON["alltoall"]  # drop, no pad
    assert moe_host_sync(128, "hybridep", None, full_iteration_graph=True) is None


def test_rows():
    nemo = {r["id"]: r for r in _rows("nemo_perf")}
    assert moe_host_sync_of_row(nemo["nemo_qwen3-30b-a3b_b200_8gpu_mxfp8_26.02"]) == SYNC_REASON["alltoall"]
    assert moe_host_sync_of_row(nemo["nemo_qwen3-30b-a3b_h100_16gpu_fp8_26.02"]) == SYNC_REASON["deepep"]
    assert moe_host_sync_of_row(nemo["nemo_qwen3-30b-a3b_gb200_8gpu_mxfp8_26.06"]) is None  # full_iteration
    assert moe_host_sync_of_row(nemo["nemo_gpt3-5b_h100_64gpu_fp8_24.07"]) is None  # dense
    folding = [r for r in _rows("papers") if (r.get("parallelism") or {}).get("moe_capacity_factor")]
    assert len(folding) == 32 and all(moe_host_sync_of_row(r) is None for r in folding)
    mixtral = [r for r in _rows("mindspeed_ascend") if (r.get("architecture") or {}).get("num_experts")]
    assert [moe_host_sync_of_row(r) for r in mixtral] == [SYNC_REASON["allgather"]]


def test_validate_reports_the_sync_per_row_without_pricing_it():
    from wanka.plan.row_check import check_row

    nemo = {r["id"]: r for r in _rows("nemo_perf")}
    synced = check_row(nemo["nemo_qwen3-30b-a3b_b200_8gpu_mxfp8_26.02"])
    assert synced.host_sync == SYNC_REASON["alltoall"] and synced.predicted
    assert check_row(nemo["nemo_qwen3-30b-a3b_gb200_8gpu_mxfp8_26.06"]).host_sync is None
    assert check_row(nemo["nemo_gpt3-5b_h100_64gpu_fp8_24.07"]).host_sync is None


def test_options_of_a_plan_run():
    moe, dense = load_model("mixtral-8x7b"), load_model("llama3-8b")
    assert moe_host_sync_of_options(dense, Options()) is None
    assert moe_host_sync_of_options(moe, Options()) == SYNC_REASON["alltoall"]
    assert moe_host_sync_of_options(moe, Options(moe_dispatcher="allgather")) == SYNC_REASON["allgather"]
    assert moe_host_sync_of_options(moe, Options(moe_flex_backend="hybridep")) == SYNC_REASON["hybridep"]
    assert moe_host_sync_of_options(moe, Options(moe_capacity_factor=1.0)) is None  # padded to capacity


def test_plan_says_so(capsys):
    assert main(["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--layout", "ep=8,gbs=512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_sync"] == SYNC_REASON["alltoall"]
    assert main(["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--layout", "ep=8,gbs=512"]) == 0
    assert "block the host once per layer forward" in capsys.readouterr().out
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--layout", "tp=8,gbs=128", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_sync"] is None
