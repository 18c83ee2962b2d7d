"""Megatron-Bridge's named userbuffers configurations reach the planner's TP overlap (plan/mbridge_userbuffers.py)."""

import json
from pathlib import Path

import pytest

from wanka.plan.mbridge_userbuffers import MBRIDGE_USERBUFFERS, stated_tp_overlap
from wanka.plan.published import framework_options, row_layout

RUNS = Path(__file__).resolve().parents[2] / "src/wanka/plan/published_runs/nemo_perf.json"


def test_hidden_share_follows_the_per_gemm_methods():
    assert stated_tp_overlap("x; tp_comm_overlap_cfg = userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192") == 1.0
    # two 4-split pipelined reduce-scatters in the BF16 config: (6 + 2 * 3/4) / 8
    assert stated_tp_overlap("userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192") == pytest.approx(7.5 / 8)
    assert stated_tp_overlap("userbuffers_fp8_unknown_config") is None
    assert stated_tp_overlap("TP comm overlap") is None
    assert all(len(m) == 8 for m in MBRIDGE_USERBUFFERS.values())


def _row(rid):
    return next(r for r in json.loads(RUNS.read_text()) if r["id"] == rid)


def test_a_row_naming_its_config_is_priced_with_it_and_one_without_keeps_the_default():
    named = _row("nemo_llama3.1-405b_gb200_256gpu_fp8_26.06")
    assert "userbuffers_fp8_b200" in named["parallelism"]["comm_overlap"]
    assert framework_options(named, row_layout(named)[0]).tp_overlap == 1.0
    # v0.1.0rc3 (NeMo 25.09): run_script.py takes the config from helpers.py COMM_OVERLAP_CONFIG_MAP, stated too
    early = _row("nemo_llama3.1-405b_b200_128gpu_fp8_25.09")
    assert "COMM_OVERLAP_CONFIG_MAP" in early["parallelism"]["comm_overlap"]
    assert framework_options(early, row_layout(early)[0]).tp_overlap == 1.0
    # a row that names no configuration keeps the profile's assumed fraction
    unnamed = dict(named, parallelism=dict(named["parallelism"], comm_overlap="TP comm overlap"))
    assert framework_options(unnamed, row_layout(unnamed)[0]).tp_overlap == 0.5
    off = dict(named, parallelism=dict(named["parallelism"], comm_overlap="none; " + named["parallelism"]["comm_overlap"]))
    assert framework_options(off, row_layout(off)[0]).tp_overlap == 0.0  # a row turning overlap off stays off


def test_llama3_70b_rows_name_their_h8192_config():
    """Llama 3 70B's scripts select the hidden-8192 configurations (llama3_llm_pretrain.py; helpers.py at
    v0.1.0rc3): FP8 ones all ring exchange or bulk, so every Megatron-Bridge row with TP names one and
    prices its TP traffic as hidden (still capped by each GEMM)."""
    rows = [r for r in json.loads(RUNS.read_text()) if r["id"].startswith("nemo_llama3-70b")
            and "Bridge" in r["parallelism"]["framework"] and r["parallelism"]["tp"] > 1]
    assert len(rows) >= 10
    for r in rows:
        gpu = "h100" if "_h100_" in r["id"] else "b200"
        assert f"userbuffers_fp8_{gpu}_h8192" in r["parallelism"]["comm_overlap"], r["id"]
        assert framework_options(r, row_layout(r)[0]).tp_overlap == 1.0, r["id"]
    assert stated_tp_overlap("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192") == pytest.approx(7.5 / 8)


def test_nemo_2_rows_of_dgxc_are_read_with_the_release_that_defined_their_config():
    """dgxc's NeMo 2.0 rows name the userbuffers configuration their scripts select. NeMo v2.2.1 (25.02) defined the
    H100 FP8 ones with pipelined proj/fc2 fprop collectives, v2.3.x (25.04) with ring exchange (userbuffers.py at each
    tag); DeepSeek-V3's 25.04 script turns TP overlap off (pretrain_deepseek_v3.py)."""
    name = "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192"
    assert stated_tp_overlap(f"{name} as NeMo@v2.2.1 defines it") == pytest.approx(7.5 / 8)
    assert stated_tp_overlap(f"{name} (NeMo@v2.3.0 scripts/performance/llm/pretrain_llama31_405b.py)") == 1.0
    dgxc = {r["id"]: r for r in json.loads((RUNS.parent / "dgxc.json").read_text())}
    for rid, share in (("dgxc_llama3.1-405b_h100_1024gpu_fp8_25.02", 7.5 / 8),
                       ("dgxc_llama3.1-405b_h100_512gpu_fp8_25.04", 1.0),
                       ("dgxc_llama3.1-405b_h100_512gpu_bf16_25.04", 7.5 / 8),
                       ("dgxc_llama3.1-70b_h100_64gpu_fp8_25.02", 7.5 / 8),
                       ("dgxc_llama3.1-405b_gb200_256gpu_fp8_25.04", 1.0),
                       ("dgxc_deepseek-v3-671b_h100_512gpu_bf16_25.04", 0.0)):
        r = dgxc[rid]
        assert framework_options(r, row_layout(r)[0]).tp_overlap == pytest.approx(share), rid
    # the launcher-era rows (NeMo 24.x) name none: the profile's assumed share stays
    old = dgxc["dgxc_llama3.1-405b_h100_576gpu_fp8_24.09"]
    assert old["parallelism"]["comm_overlap"] is None
    assert framework_options(old, row_layout(old)[0]).tp_overlap == 0.5
