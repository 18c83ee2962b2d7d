"""NVIDIA's published NeMo / Megatron-Bridge performance summary tables (plan/published_runs/nemo_perf.json;
sources per row in nemo_perf.md) through `wanka plan validate`: provenance of every number, the batch
identity, model FLOPs against tokens/s, and the accuracy the planner reaches on them (a measured result,
Dec 2026: dense rows price like dgxc, the MoE recipes do not)."""

import re
import statistics
import subprocess
from pathlib import Path

import pytest

from wanka.plan.published import load_rows
from priced_rows import priced_errors

ROWS = load_rows("nemo_perf")
MIRRORS = {"NVIDIA/NeMo": Path("/work/.mirror/NVIDIA+NeMo/repo"),
           "NVIDIA-NeMo/Megatron-Bridge": Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")}


def _cells(row) -> list[str]:
    line = re.sub(r"\[\^[^\]]*\]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", row["source_excerpt"]))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _numbers(row) -> set[str]:
    return {n for c in _cells(row) for n in re.findall(r"\d+(?:\.\d+)?", c)}


def test_every_number_is_in_its_table_line():
    for row in ROWS:
        p, res, nums = row["parallelism"], row["result"], _numbers(row)
        for v in (row["hardware"]["gpu_count"], p["tp"], p["pp"], p["cp"], p["micro_batch_size"],
                  p["global_batch_size_seqs"], row["architecture"]["seq_len"], res["tokens_per_sec_per_gpu"],
                  res["tflops_per_gpu"], p["ep"], p["virtual_pipeline_chunks_per_rank"]):
            if v is not None:
                assert str(v) in nums, (row["id"], v)
    # a table line gives a second run (`_alt`, the parenthesised values) exactly where its tokens/s cell has one
    per_line = {}
    for row in ROWS:
        per_line.setdefault((row["source_locator"].split(" (")[0], row["source_excerpt"]), []).append(row["id"])
    for (_, line), ids in per_line.items():
        two = "(" in _cells({"source_excerpt": line})[-2]
        assert len(ids) == (2 if two else 1) and sum("_alt" in i for i in ids) == (1 if two else 0), ids


@pytest.mark.parametrize("source", sorted(MIRRORS))
def test_table_line_is_at_the_named_commit(source):
    repo = MIRRORS[source]
    if not repo.exists():
        pytest.skip(f"no local snapshot of {source}")
    texts = {}
    for row in (r for r in ROWS if r["source"] == source):
        m = re.match(r"(\S+)@([0-9a-f]{40}) \(.*line (\d+)", row["source_locator"])
        path, commit, line = m.group(1), m.group(2), int(m.group(3))
        if (commit, path) not in texts:
            texts[commit, path] = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True,
                                                 capture_output=True, text=True).stdout.split("\n")
        assert texts[commit, path][line - 1].strip() == row["source_excerpt"], row["id"]


def test_batch_identity_gbs_is_mbs_times_ga_times_dp():
    for row in ROWS:
        p, gpus = row["parallelism"], row["hardware"]["gpu_count"]
        assert p["dp"] * p["tp"] * p["pp"] * p["cp"] == gpus, row["id"]
        assert p["micro_batch_size"] * p["grad_accum_steps"] * p["dp"] == p["global_batch_size_seqs"], row["id"]


def test_published_tflops_and_tokens_imply_one_flop_count_per_model():
    """TFLOP/s over tokens/s is the FLOPs per token the source counts: one number per model, sequence
    length and source for the dense models (within 3%). The two sources count differently (Llama 3 8B at
    8192: 57.9 GFLOP/token in NeMo 24.07, 51.5 in Megatron-Bridge), so they are not compared with each other."""
    per = {}
    for row in ROWS:
        if not row["architecture"].get("num_experts"):
            key = (row["model_name"], row["architecture"]["seq_len"], row["source"])
            per.setdefault(key, []).append(row["result"]["tflops_per_gpu"] / row["result"]["tokens_per_sec_per_gpu"])
    assert len(per) >= 12
    for key, v in per.items():
        assert max(v) <= 1.03 * min(v), key


def _errors(pred):
    return priced_errors(ROWS, pred)


def test_dense_rows_price_like_dgxc():
    errs = _errors(lambda r: not r["architecture"].get("num_experts"))
    print("dense", len(errs), statistics.median(abs(e) for e in errs))
    assert len(errs) >= 60
    assert statistics.median(abs(e) for e in errs) <= 0.09


def test_nemo_2407_h100_table_within_8_percent():
    errs = _errors(lambda r: r["id"].endswith("_24.07"))
    assert len(errs) == 12
    assert statistics.median(abs(e) for e in errs) <= 0.08


def test_moe_recipes_are_a_known_gap():
    """Qwen3-30B-A3B and gpt-oss-120b run well below the planner's price (gpt-oss: sliding-window
    attention with sinks, not priced; Qwen3-30B: the 26.02 -> 26.02.01 H100 rows of one layout moved 5113 -> 9058
    tokens/s, software the planner does not see). Kept so a change in either direction is seen."""
    errs = _errors(lambda r: bool(r["architecture"].get("num_experts")))
    print("MoE", len(errs), statistics.median(errs))
    assert len(errs) >= 60
    assert 0.0 < statistics.median(errs) <= 0.5


def test_recipe_switches_reach_the_planner():
    """The switches each row copies from its release's Megatron-Bridge performance preset (nemo_perf.md 'Recipe
    switches') are what validate prices: BF16 gradient reduction (grad_reduce_in_fp32=False) -> 2-byte gradients,
    recompute_modules -> the same modules, Qwen3-235B on H100 (tp_comm_overlap=False from 25.11) -> no TP overlap."""
    from wanka.plan.published import framework_options, row_layout

    stated = [r for r in ROWS if "grad_reduce_in_fp32=False" in (r["parallelism"]["zero_or_fsdp"] or "")]
    assert len(stated) >= 100
    for row in stated:
        lay, _ = row_layout(row)
        opts = framework_options(row, lay)
        assert opts.grad_bytes == 2, row["id"]
        rec = row["parallelism"]["recompute"] or ""
        if rec.startswith("selective: "):
            mods = rec.split(" (")[0].removeprefix("selective: ").split(", ")
            assert lay.recompute == "selective" and set(opts.recompute_modules) == set(mods), row["id"]
        elif rec.startswith("none"):
            assert lay.recompute == "none", row["id"]
        no_overlap = "qwen3-235b" in row["id"] and "_h100_" in row["id"] and "_25.09" not in row["id"]
        if no_overlap:
            assert opts.tp_overlap == 0, row["id"]
        elif lay.tp > 1:
            assert opts.tp_overlap > 0, row["id"]


def test_bridge_rows_overlap_pipeline_sends_when_interleaved():
    """Megatron-Bridge's CommOverlapConfig sets overlap_p2p_comm whenever pp > 1 and vp > 1 (comm_overlap.py,
    v0.1.0rc3 to v0.6.0): every such row states it and validate prices it (plan/interleaved.py); others do not."""
    from wanka.plan.published import framework_options, row_layout

    bridge = [r for r in ROWS if "Bridge" in r["parallelism"]["framework"]]
    interleaved = [r for r in bridge if r["parallelism"]["pp"] > 1
                   and (r["parallelism"]["virtual_pipeline_chunks_per_rank"] or 1) > 1]
    assert len(interleaved) >= 60
    for row in bridge:
        lay, _ = row_layout(row)
        assert framework_options(row, lay).pp_p2p_overlap == (row in interleaved), row["id"]
