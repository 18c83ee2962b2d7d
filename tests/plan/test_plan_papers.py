"""Runs from papers (plan/published_runs/papers.json: MegaScale NSDI'24, Llama 3, OPT-175B,
MoE Parallel Folding, DeepSeek-V3): every row loads and is priced as its paper states it, the mechanisms those papers
describe are the ones priced, and the planner's error stays where it was measured."""

import dataclasses
import statistics

import pytest

from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options, cp_layer_exposed_s
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model
from wanka.plan.row_check import check_row
from wanka.plan.validate_summary import summary

# measured when the set was added (Dec 2026): median |error| 8.0% over 25 rows (p90 12.5%); with
# Megatron-LM's 'local' DDP before --overlap-grad-reduce, Llama 3's all-gather context parallelism
# and metaseq's launcher for OPT: 7.7% over 26 (p90 11.8%); with that Megatron-LM's default
# non-flash attention: 4.7% (p90 9.1%); with the 32 MoE Parallel Folding rows (their median
# 10.8%): 7.3% over 58 (p90 23.5%); with the all-to-all dispatcher's regrouping by local expert
# (plan/moe_cost.py): 5.9% (p90 20.3%); with the Qwen2 rows interleaved as the ModelZoo ran them and
# the routed tokens' TP collectives exposed (session 6): 5.8% (p90 15.2%); with IBM's fms-fsdp rows and llm-foundry's MPT
# rows (session 6; 12 + 40 rows, their own medians in test_plan_fms_fsdp.py / test_plan_mpt_foundry.py):
# 7.9% over 110 (p90 29.3%); with FlashAttention-2 for the PyTorch-native stacks (MPT, Llama 3;
# frameworks._PT_FA2, session 9): 7.1% (p90 24.2%). The bound is that plus 1 point of margin
MEDIAN_BOUND = 0.081


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in load_rows("papers")}


@pytest.fixture(scope="module")
def checks(rows):
    return {rid: check_row(r) for rid, r in rows.items()}


def _estimate(row, **options):
    lay, _ = row_layout(row)
    opts = dataclasses.replace(framework_options(row, lay), **options)
    return estimate(row_model(row), row_cluster(row), lay, options=opts)


def test_every_row_loads_and_is_priced(checks):
    assert len(checks) == 111 and all(c.skipped is None for c in checks.values())
    s = summary(list(checks.values()))
    assert s["compared"] == 110  # DeepSeek-V3's GPU-hours per trillion tokens is a run-level row
    assert checks["deepseek_v3_2048gpu_runlevel"].basis == "run-level"


def test_megascale_table2_is_transcribed_consistently(rows, checks):
    """Table 2's throughput column agrees with its batch and iteration-time columns (to the 3
    digits the table prints), and the runs are priced with the paper's layout and profile."""
    t2 = [r for rid, r in rows.items() if rid.startswith("megascale_t2_")]
    assert len(t2) == 16
    for r in t2:
        lay, _ = row_layout(r)
        res = r["result"]
        implied = lay.gbs * 2048 / res["iteration_time_s"]
        assert implied == pytest.approx(res["tokens_per_sec_total"], rel=0.012)
        assert (lay.tp, lay.pp, lay.vpp, lay.gbs) == (8, 8, 6, 768 if lay.dp * 64 <= 1024 else 6144)
        expected = "megascale" if "_megascale_" in r["id"] else "megatron-lm-2023"
        assert framework_options(r, lay).profile == expected
        assert checks[r["id"]].basis == "tokens/s"


def test_megatron_lm_before_overlap_grad_reduce_reduces_after_the_backward(rows):
    """Megatron-LM 285068c8 (2023-01) ran the 'local' DDP all-reduce after the backward: the same
    run priced with the gradient reduce overlapped is faster, and a row dated after the flag landed
    (2023-08-16) gets the overlapped Megatron-LM profile."""
    row = rows["megascale_t2_megatron_175b_12288gpu"]
    lay, _ = row_layout(row)
    assert framework_options(row, lay).dp_overlap is False
    local, overlapped = _estimate(row), _estimate(row, dp_overlap=True)
    assert local.breakdown["dp_comm"] > overlapped.breakdown["dp_comm"]
    later = dict(row, parallelism=dict(row["parallelism"], framework="Megatron-LM (2023-09-25)"))
    assert framework_options(later, lay).profile == "megatron-lm"


def test_megatron_lm_2023_materialises_attention_unless_flash_attn_is_asked_for(rows):
    """--use-flash-attn was opt-in at 285068c8: the baseline is priced with the scores in HBM, a
    row naming the flag with FlashAttention, and the unfused run is the slower one."""
    row = rows["megascale_t2_megatron_175b_256gpu"]
    lay, _ = row_layout(row)
    assert framework_options(row, lay).attention == "unfused"
    flash = dict(row, parallelism=dict(row["parallelism"], comm_overlap="--use-flash-attn"))
    assert framework_options(flash, lay).attention == "flash"
    assert _estimate(row).tokens_per_s_per_gpu < _estimate(row, attention="flash").tokens_per_s_per_gpu


def test_llama3_context_parallelism_all_gathers_on_the_critical_path(rows):
    """Llama 3 s.3.3.2: K,V all-gathered, the latency exposed. A ring hides the same traffic under
    a 128K attention, the all-gather does not: the 128K row pays cp_comm, the 8K rows none."""
    long = rows["llama3_t4_405b_16384gpu_seq131072"]
    lay, _ = row_layout(long)
    assert framework_options(long, lay).cp_rotate == "allgather-exposed"
    assert _estimate(long).breakdown["cp_comm"] > 0 == _estimate(long, cp_rotate="ring").breakdown["cp_comm"]
    assert _estimate(rows["llama3_t4_405b_8192gpu_seq8192"]).breakdown["cp_comm"] == 0
    cluster, resolved = row_cluster(long), _estimate(long).layout  # the estimate's resolved groups
    fwd, bwd = cp_layer_exposed_s(cluster, resolved, 4e6, 1.0, Options(cp_rotate="allgather-exposed"))
    assert fwd > 0 and bwd > 0  # a 4 MB chunk against 1 s of attention: a ring hides it all
    assert cp_layer_exposed_s(cluster, resolved, 4e6, 1.0, Options(cp_rotate="ring")) == (0.0, 0.0)


def test_llama3_attention_runs_at_flashattention2s_rate(rows, checks):
    """Meta's 2024 stack predates FlashAttention-3 (frameworks._PT_FA2): attention at FA2's Hopper
    rate. At 128K tokens attention is ~40% of the FLOPs, so the kernel decides the row: priced with
    FA3's rate it was 43.5% fast, with FA2's it is within 20%; the 8K rows move by a few points."""
    long = rows["llama3_t4_405b_16384gpu_seq131072"]
    lay, _ = row_layout(long)
    assert framework_options(long, lay).attention == "flash2"
    fa2, fa3 = _estimate(long), _estimate(long, attention="flash")
    assert fa3.tokens_per_s_per_gpu / fa2.tokens_per_s_per_gpu > 1.2
    assert abs(checks["llama3_t4_405b_16384gpu_seq131072"].error) < 0.2
    short = rows["llama3_t4_405b_8192gpu_seq8192"]
    assert 1.0 < _estimate(short, attention="flash").tokens_per_s_per_gpu / _estimate(short).tokens_per_s_per_gpu < 1.05


def test_opt_runs_the_metaseq_launcher_layout(rows):
    """metaseq opt_baselines.py: 8 sequences per DP rank in one micro-batch, FSDP without
    resharding after forward (ZeRO-2), activation checkpointing, TP 8."""
    lay, _ = row_layout(rows["opt_175b_992gpu"])
    assert (lay.tp, lay.dp, lay.mbs, lay.gbs, lay.zero, lay.recompute) == (8, 124, 8, 992, 2, "full")


def test_moe_folding_rows_split_attention_and_experts_as_table3(rows):
    """Folding rows put the experts on EP x ETP 1 across the attention's TP (Table 3); the MCore
    rows keep EP inside DP with the experts split over TP; all drop tokens at capacity 1."""
    moe = [r for rid, r in rows.items() if rid.startswith("moefolding_")]
    assert len(moe) == 32
    for r in moe:
        lay, _ = row_layout(r)
        assert lay.tp * lay.pp * lay.dp == r["hardware"]["gpu_count"] and lay.gbs in (256, 1024)
        assert framework_options(r, lay).moe_capacity_factor == 1.0
        if "_folding_" in r["id"]:
            assert lay.expert_tp == 1 and lay.ep == r["parallelism"]["ep"]
        else:
            assert lay.expert_tp == lay.tp and lay.dp % lay.ep == 0


def test_qwen2_folding_rows_run_the_modelzoo_qwen2_benchmark_interleaved(rows):
    """The ModelZoo's Qwen2-57B-A14B benchmark (runtime.conf@78fd4d6d: PP 4, VPP 7 -> one layer per
    virtual stage; no --tp-comm-overlap; Megatron-LM's overlap_p2p_comm): the bubble at 8 micro-batches
    is (pp - 1) / (vpp m) of the busy time, Narayanan et al. SC'21 s.2.2 -- 7x smaller than at VPP 1."""
    qwen = [r for rid, r in rows.items() if rid.startswith("moefolding_qwen")]
    assert len(qwen) == 12
    for r in qwen:
        lay, _ = row_layout(r)
        opts = framework_options(r, lay)
        assert (lay.pp, lay.vpp, opts.tp_overlap, opts.pp_p2p_overlap) == (4, 7, 0.0, True)
    big = rows["moefolding_qwen_folding_1024gpu_gbs1024"]
    e, flat = _estimate(big), _estimate({**big, "parallelism": {**big["parallelism"],
                                                               "virtual_pipeline_chunks_per_rank": 1}})
    m = e.layout.microbatches
    assert m == 8
    busy = e.step_time_s - e.breakdown["pipeline_bubble"] - e.breakdown["dp_comm"] - e.breakdown["optimizer"]
    # at least the closed form; the fill and flush also wait on every hop of the chunk ring (interleaved.py)
    assert 3 / (7 * m) <= e.breakdown["pipeline_bubble"] / busy <= 1.5 * 3 / (7 * m)
    assert flat.breakdown["pipeline_bubble"] > 5 * e.breakdown["pipeline_bubble"]


def test_median_error_stays_within_what_was_measured(checks):
    compared = [abs(c.error) for c in checks.values() if c.basis != "run-level"]
    assert statistics.median(compared) <= MEDIAN_BOUND
