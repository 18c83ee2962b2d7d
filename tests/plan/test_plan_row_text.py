"""How validate reads rows written by others: framework, ZeRO, recompute, precision and GPU
phrasings, missing or mistyped fields (priced with an assumption or skipped naming the field,
never a traceback), and MFU stated against another peak or FLOP count (plan/row_text.py,
plan/row_measured.py)."""

import copy

import pytest

from wanka.errors import SpecError
from wanka.plan.frameworks import family_of
from wanka.plan.published import load_rows, row_layout
from wanka.plan.row_check import check_row
from wanka.plan.row_text import catalog_part, precision_of, recompute_of, zero_stage


@pytest.mark.parametrize("text, family", [
    ("NeMo Megatron", "megatron-core"), ("NVIDIA NeMo 1.x", "megatron-core"), ("NeMo Framework 24.07", "megatron-core"),
    ("Megatron-LM (NVIDIA)", "megatron-lm"), ("Megatron-Core v0.9", "megatron-core"),
    ("Megatron-LM core_r0.9.0", "megatron-core"), ("Megatron_Core", "megatron-core"),
    ("PyTorch FSDP (full shard)", "fsdp"), ("FSDP hybrid shard", "fsdp"), ("torch FSDP2", "fsdp"),
    ("PyTorch FSDP on CoreWeave", "fsdp"),  # not Megatron-Core: 'core' is not a word there
    ("DeepSpeed ZeRO stage 2", "deepspeed"), ("DeepSpeed-Megatron", "megatron-deepspeed"),
    ("Megatron-DeepSpeed", "megatron-deepspeed"), ("MaxText (JAX)", "jax-xla"), ("Pax", "jax-xla"),
    ("Paxml", "jax-xla"), ("T5X", "jax-xla"), ("MegaScale (ByteDance)", "megascale"), ("ByteDance Megascale", "megascale"),
    ("Meta's Llama 3 stack (PyTorch)", "llama3"), ("Fairseq/Metaseq", "fsdp"), ("fairseq", "fsdp"),
    ("torchtitan", "torchtitan"), ("MindSpeed", "mindspeed"),
    # their own stacks, no profile: validate prices them with plain Options() (docs/plan.md)
    ("veScale", None), ("Colossal-AI", None), ("InternEvo/InternLM", None), ("HAI-LLM", None), (None, None), (42, None),
])
def test_framework_phrasings(text, family):
    assert family_of(text) == family


@pytest.mark.parametrize("text, stage", [
    ("DeepSpeed ZeRO stage 2", 2), ("ZeRO-1 via Megatron distributed optimizer", 1), ("zero_stage: 1", 1),
    ("ZeRO-DP stage 1", 1), ("ZeRO3", 3), ("PyTorch FSDP (full shard)", 3), ("FULL_SHARD", 3), ("HYBRID_SHARD", 3),
    ("Hybrid Sharded Data Parallel", 3), ("fully sharded data parallel", 3), ("SHARD_GRAD_OP", 2),
    ("reshard_after_forward: false", 2), ("optimizer state sharding", 1), ("NO_SHARD", 0), ("no ZeRO", 0),
    ("none (no --use-distributed-optimizer)", 0), ("DDP", 0), (None, 0),
])
def test_zero_phrasings(text, stage):
    assert zero_stage(text) == stage


@pytest.mark.parametrize("text, mode", [
    ("selective activation recompute", "selective"), ("full activation checkpointing", "full"),
    ("no recompute", "none"), ("without activation checkpointing", "none"), ("disabled", "none"),
    ("recompute all layers", "full"), ("activation recomputation", "full"), ("gradient checkpointing", "full"),
    ("remat_policy=minimal", "selective"), ("full (--checkpoint-activations)", "full"), ("true", "full"),
])
def test_recompute_phrasings(text, mode):
    assert recompute_of(text) == (mode, True)


def test_unstated_recompute_and_precision_are_assumed_not_silent():
    assert recompute_of(None) == ("none", False) and recompute_of("not stated") == ("none", False)
    assert precision_of(None) == ("bf16", False) and precision_of("mixed precision") == ("bf16", False)


@pytest.mark.parametrize("text, precision", [
    ("BF16 mixed precision", "bf16"), ("FP8 (Transformer Engine)", "fp8"), ("float16", "fp16"),
    ("FP16 mixed precision", "fp16"), ("BF16 (FP8 not used)", "bf16"), ("bfloat16, no fp8", "bf16"),
])
def test_precision_phrasings(text, precision):
    assert precision_of(text) == (precision, True)


def test_fp32_training_is_refused_naming_the_field():
    with pytest.raises(SpecError, match="parallelism.precision"):
        precision_of("TF32")


@pytest.mark.parametrize("text, part", [
    ("A100-SXM4-80GB", "a100-80gb"), ("A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100 SXM 40GB", "a100-40gb"),
    ("A100 40G", "a100-40gb"), ("H100 SXM5 80GB", "h100-sxm"), ("H800", "h800"), ("H20", "h20"), ("H200", "h200"),
    ("GB200 NVL72", "gb200"), ("DGX H100", "h100-sxm"), ("Ascend 910B2", "ascend-910b"),
    ("NVIDIA H100 SXM5 (not PCIe)", "h100-sxm"), ("GB200 NVL 72", "gb200"),
    ("A800", "a800"), ("NVIDIA A800-SXM4-80GB", "a800"), ("DGX-GB300", "gb300"), ("NVIDIA GB300 NVL72", "gb300"),
    ("DGX-B300", "b300"), ("HGX B300", "b300"),
    ("AMD Instinct MI355X", "mi355x"), ("MI325X", "mi325x"), ("Intel Gaudi2", "gaudi2"), ("Gaudi 3", "gaudi3"),
    ("MI250X", "mi250x-gcd"), ("GH200", "gh200"),
])
def test_gpu_phrasings(text, part):
    assert catalog_part(text) == part


@pytest.mark.parametrize("text", ["A800 PCIe", "MI250", "H100 PCIe", "H100 NVL", "V100", "Gaudi"])
def test_parts_not_in_the_catalogue_are_named(text):
    with pytest.raises(SpecError, match="not in the catalogue") as exc:
        catalog_part(text)
    assert exc.value.field == "hardware.gpu"


@pytest.mark.parametrize("text", ["TPU v4", "Cloud TPU v5p"])
def test_tpu_slices_are_refused_as_not_a_switched_cluster(text):
    with pytest.raises(SpecError, match="ICI tori") as exc:
        catalog_part(text)
    assert exc.value.field == "hardware.gpu"


def test_a100_memory_from_hbm_gb_else_assumed():
    assumed = []
    assert catalog_part("NVIDIA A100", hbm_gb=40) == "a100-40gb"
    assert catalog_part("NVIDIA A100", assumed=assumed) == "a100-80gb"
    assert any("80GB" in a for a in assumed)


def _base():
    return copy.deepcopy(next(r for r in load_rows("calibration") if r["id"] == "sc21_t1_145.6B"))


def test_missing_optional_fields_are_priced_with_their_assumption():
    base = check_row(_base())
    row = _base()
    p = row["parallelism"]
    seq = row["architecture"].pop("seq_len")
    p["seq_len"] = seq  # kept with the batch instead
    p["micro_batch_size"] = None
    p["virtual_pipeline_chunks_per_rank"] = None
    p["pipeline_schedule"] = "interleaved 1F1B"
    p["precision"] = None
    c = check_row(row)
    assert c.skipped is None and c.predicted > 0
    assert {"mbs 1", "BF16 (precision not stated)"} <= set(c.assumed)
    assert any(a.startswith("vpp 1") for a in c.assumed)
    assert c.layout.split(",")[-2] == "precision=bf16" and base.predicted > 0


def test_global_batch_from_tokens_or_accumulation():
    row = _base()
    p, seq = row["parallelism"], row["architecture"]["seq_len"]
    gbs = p.pop("global_batch_size_seqs")
    p["global_batch_tokens"] = gbs * seq
    assert row_layout(row)[0].gbs == gbs
    p.pop("global_batch_tokens")
    p["grad_accum_steps"] = gbs // (p["dp"] * p["micro_batch_size"])
    lay, assumed = row_layout(row)
    assert lay.gbs == gbs and "gbs = dp x mbs x grad_accum_steps" in assumed


def test_one_missing_degree_is_derived_from_the_gpu_count():
    row = _base()
    pp = row["parallelism"].pop("pp")
    lay, assumed = row_layout(row)
    assert lay.pp == pp and any(a.startswith("pp = GPUs") for a in assumed)


def test_a_dp_that_does_not_make_the_gpu_count_follows_the_gpu_count():
    row = _base()
    dp = row["parallelism"]["dp"]
    row["parallelism"]["dp"] = 2 * dp
    lay, assumed = row_layout(row)
    assert lay.dp == dp and any(a.startswith(f"dp = {dp} from the GPU count") for a in assumed)
    row["parallelism"].update(dp=dp // 2, ep=2)  # expert ranks counted outside dp
    lay, assumed = row_layout(row)
    assert lay.dp == dp and lay.ep == 2 and any("outside dp" in a for a in assumed)


def test_degrees_that_cannot_make_the_gpu_count_skip_naming_dp():
    row = _base()
    row["hardware"]["gpu_count"] += 8  # 1544 = 8 x 193: no dp makes it with tp 8 pp 8
    with pytest.raises(SpecError, match="parallelism.dp"):
        row_layout(row)
    row["hardware"]["gpu_count"] += 1  # not whole nodes: the cluster refuses first, naming the row's field
    assert check_row(row).skipped.startswith("hardware.gpu_count")


@pytest.mark.parametrize("section, key, value", [
    ("parallelism", "tp", "eight"), ("parallelism", "tp", 2.5), ("parallelism", "sequence_parallel", "maybe"),
    ("hardware", "gpu", "TPU v4"), ("hardware", "gpu_count", -8), ("result", "tokens_per_sec_per_gpu", "fast"),
    ("parallelism", "zero_or_fsdp", "ZeRO-3 with CPU offload"), ("hardware", "inter_node_bw_per_gpu_Gbps", "fast"),
])
def test_bad_fields_skip_with_one_line_naming_the_field(section, key, value):
    row = _base()
    row[section][key] = value
    c = check_row(row)
    assert c.skipped is not None and c.skipped.startswith(f"{section}.{key}"), c.skipped
    assert "\n" not in c.skipped


def test_no_field_of_any_built_in_row_set_to_null_or_junk_raises():
    """Each field of a row of each family, set to None, a string or a list: priced or skipped, never raised."""
    rows = {}
    for name in ("calibration", "dgxc", "papers", "torchtitan", "megatron_deepspeed"):
        for r in load_rows(name):
            rows.setdefault(family_of(r["parallelism"].get("framework")), r)
    for row in rows.values():
        for section in ("architecture", "hardware", "parallelism", "result"):
            for key in row[section]:
                for junk in (None, "n/a", [1]):
                    bad = copy.deepcopy(row)
                    bad[section][key] = junk
                    c = check_row(bad)
                    assert c.skipped is None or "\n" not in c.skipped


def test_numeric_text_is_read():
    row = _base()
    row["parallelism"]["tp"] = str(row["parallelism"]["tp"])
    row["hardware"]["gpu_count"] = f"{row['hardware']['gpu_count']:,}"
    assert check_row(row).predicted == pytest.approx(check_row(_base()).predicted)


def _mfu_row(**result):
    row = copy.deepcopy(next(r for r in load_rows("papers") if r["id"] == "llama3_t4_405b_8192gpu_seq8192"))
    row["result"].update(result)
    return row


def test_mfu_against_a_stated_sparse_peak_is_converted_to_the_dense_one():
    dense = check_row(_mfu_row())
    row = _mfu_row(mfu_pct=dense.mfu_measured / 2)
    row["hardware"]["peak_dense_tflops_bf16_fp16"] = 2 * 989.4  # the 2:4-sparse figure
    assert check_row(row).mfu_measured == pytest.approx(dense.mfu_measured, rel=1e-3)


def test_mfu_counted_with_causal_attention_is_raised_to_the_full_count():
    full = check_row(_mfu_row())
    causal = check_row(_mfu_row(tflops_counting="MFU, causal attention FLOPs counted at half"))
    assert causal.mfu_measured > full.mfu_measured  # same stated MFU, fewer FLOPs counted per token
    assert causal.error < full.error


def test_hfu_from_tflops_when_the_counting_includes_recompute():
    row = _mfu_row(mfu_pct=None, tflops_per_gpu=400.0, tflops_counting="HFU (with recompute)")
    c = check_row(row)
    assert c.basis == "HFU" and c.hfu_measured == pytest.approx(100 * 400 / 989.4, rel=1e-3)


def test_whole_run_average_from_days_and_gpus():
    row = _mfu_row(mfu_pct=None, tflops_per_gpu=None, training_tokens=15.6e12, training_days=54, gpu_hours=None)
    c = check_row(row)
    assert c.basis == "run-level"
    assert c.measured == pytest.approx(15.6e12 / (54 * 86400 * row["hardware"]["gpu_count"]))


def test_an_undated_framework_takes_the_year_of_its_paper():
    """'Megatron-LM' with no year, reported by an arXiv paper of 2021: the 2021 profile (no FlashAttention)."""
    from wanka.plan.published import framework_options
    from wanka.plan.row_text import row_year

    row = _base()
    row["parallelism"]["framework"] = "Megatron-LM (NVIDIA)"
    assert row_year(row) == 2021  # source names arXiv:2104.04473
    assert framework_options(row, row_layout(row)[0]).attention == "unfused"
    row["source"], row["source_url"] = "a 2024 report", None
    assert framework_options(row, row_layout(row)[0]).attention == "flash"


def test_a_stated_peak_of_another_part_is_not_used_and_is_listed():
    row = _mfu_row()
    row["hardware"]["peak_dense_tflops_bf16_fp16"] = 312  # an A100's, on an H100 row
    c = check_row(row)
    assert c.mfu_measured == pytest.approx(check_row(_mfu_row()).mfu_measured, rel=1e-3)
    assert any(a.startswith("stated peak 312") for a in c.assumed)


@pytest.mark.parametrize("text, activation", [
    ("SwiGLU", "swiglu"), ("gated GELU", "swiglu"), ("ReGLU", "swiglu"), ("SiLU-gated", "swiglu"),
    ("GELU", "gelu"), ("squared-ReLU", "gelu"), (None, "gelu")])
def test_gated_units_have_three_matrices(text, activation):
    from wanka.plan.published import _activation

    assert _activation(text) == activation


def test_an_unstated_ffn_width_is_assumed():
    row = _base()
    row["architecture"]["ffn_hidden_size"] = None
    c = check_row(row)
    assert c.skipped is None and "ffn_hidden_size 4 x hidden (not stated)" in c.assumed


@pytest.mark.parametrize("framework, attention", [
    ("NeMo Megatron (2022)", "unfused"), ("Megatron-LM (2022)", "unfused"), ("PyTorch FSDP, 2022", "unfused"),
    ("NeMo 24.12", "flash"), ("Megatron-Core r0.8.0", "flash")])
def test_runs_dated_up_to_2022_had_no_flash_attention(framework, attention):
    from wanka.plan.published import framework_options

    assert framework_options({"parallelism": {"framework": framework}}).attention == attention


def test_a_missing_architecture_field_is_named_as_the_row_names_it():
    row = _base()
    row["architecture"]["hidden_size"] = None
    assert check_row(row).skipped.startswith("architecture.hidden_size")


def test_a_model_read_at_another_size_than_stated_is_listed():
    row = _base()
    row["architecture"]["ffn_hidden_size"] = None
    assert not any("parameters" in a for a in check_row(row).assumed)  # 4h is this GPT's width
    row["architecture"]["total_params_B"] *= 2
    assert any(a.startswith("model as read has") for a in check_row(row).assumed)


def test_an_moe_row_without_its_expert_count_is_skipped():
    row = _base()
    row["model_kind"] = "MoE"
    assert check_row(row).skipped.startswith("architecture.num_experts")


@pytest.mark.parametrize("counting, peak", [("MFU against the FP8 dense peak", 989.4), ("vs FP8 peak", 2 * 989.4)])
def test_mfu_against_the_fp8_peak_is_doubled_once(counting, peak):
    """Against the FP8 peak (2x BF16): doubled -- once, also when the row already states that peak."""
    bf16 = check_row(_mfu_row(tflops_per_gpu=None))
    row = _mfu_row(tflops_per_gpu=None, mfu_pct=bf16.mfu_measured / 2, tflops_counting=counting)
    row["hardware"]["peak_dense_tflops_bf16_fp16"] = peak
    assert check_row(row).mfu_measured == pytest.approx(bf16.mfu_measured, rel=1e-3)


@pytest.mark.parametrize("text, value", [("true", True), ("enabled with TP", True), ("Yes", True), ("off", False),
                                         ("no", False), (False, False)])
def test_yes_no_phrasings(text, value):
    from wanka.plan.row_text import flag

    assert flag(text, "parallelism.sequence_parallel") is value


def test_an_unstated_sharding_is_what_torchtitan_and_llama3_rows_state():
    """Dropping zero_or_fsdp from the torchtitan and Llama 3 rows gives the stage they state: FSDP full
    shard without PP, ZeRO-2 with PP (torchtitan reshard_after_forward = not pp_enabled) and for Llama 3."""
    rows = load_rows("torchtitan") + [r for r in load_rows("papers") if r["id"].startswith("llama3")]
    for row in rows:
        stated = row_layout(row)[0].zero
        bare = copy.deepcopy(row)
        bare["parallelism"]["zero_or_fsdp"] = None
        lay, assumed = row_layout(bare)
        assert lay.zero == stated, row["id"]
        assert any("ZeRO-" in a for a in assumed)


def test_an_unstated_nvlink_domain_is_the_parts_usual():
    from wanka.plan.published import row_cluster

    row = copy.deepcopy(next(r for r in load_rows("dgxc") if "gb200" in r["id"]))
    row["hardware"]["nvlink_domain_size"] = None
    assumed = []
    row_cluster(row, assumed)
    assert "NVLink domain 72 (the part's usual)" in assumed  # GB200 NVL72, not an 8-GPU HGX board


def test_a_stage_in_a_megatron_text_of_alternatives_is_not_taken():
    """SC'21's 'Megatron-LM / DeepSpeed ZeRO-3' PTD-P rows without zero_or_fsdp stay unsharded."""
    row = copy.deepcopy(next(r for r in load_rows("calibration") if r["id"] == "sc21_t2_ptdp_174.6B_384gpu"))
    row["parallelism"]["zero_or_fsdp"] = None
    assert row_layout(row)[0].zero == 0
    row["parallelism"]["framework"] = "DeepSpeed ZeRO-3"
    assert row_layout(row)[0].zero == 3


@pytest.mark.parametrize("rewrite", [str.upper, lambda t: t.replace("-", "_")], ids=["upper", "underscores"])
def test_case_and_separators_of_free_text_do_not_change_what_a_built_in_row_prices(rewrite):
    """Every built-in row, each free-text field upper-cased or with '_' for '-': same layout, Options,
    part and activation (the texts are matched on words, not spelling)."""
    import dataclasses

    from wanka.plan.published import framework_options, row_cluster, row_model

    def read(r):
        lay, _ = row_layout(r)
        return str(lay), dataclasses.asdict(framework_options(r, lay)), row_cluster(r).gpu.name, row_model(r).activation

    texts = [("parallelism", k) for k in ("framework", "zero_or_fsdp", "recompute", "precision", "pipeline_schedule",
                                          "comm_overlap")] + [("hardware", "gpu"), ("architecture", "ffn_activation")]
    for name in ("calibration", "dgxc", "papers", "torchtitan", "megatron_deepspeed", "mlperf", "mindspeed_ascend"):
        for row in load_rows(name):
            try:
                base = read(row)
            except SpecError:
                continue
            for section, key in texts:
                if isinstance(row[section].get(key), str):
                    other = copy.deepcopy(row)
                    other[section][key] = rewrite(other[section][key])
                    assert read(other) == base, (row["id"], key)


def test_an_moe_row_without_top_k_lists_its_assumption():
    row = copy.deepcopy(next(r for r in load_rows("papers") if r["architecture"].get("num_experts")))
    row["architecture"]["top_k"] = None
    c = check_row(row)
    assert c.skipped is None and any(a.startswith("top_k not stated") for a in c.assumed)


@pytest.mark.parametrize("network, nics, per_gpu", [
    ("InfiniBand HDR 200 Gb/s, 8 compute HCAs per node", None, 200), ("Omni-Path 4x100 Gb/s per node", None, 50),
    ("8x200G HDR InfiniBand", None, 200), ("RoCE, 400 Gbps per GPU", None, 400), ("NDR InfiniBand", None, 400),
    ("HDR InfiniBand", 4, 100), ("InfiniBand", None, None)])
def test_scale_out_bandwidth_from_the_network_text(network, nics, per_gpu):
    from wanka.plan.row_hardware import network_Gbps_per_gpu

    assert network_Gbps_per_gpu(network, nics, 8) == per_gpu


def test_a_row_without_bandwidth_takes_it_from_its_network_text():
    row = _base()
    row["hardware"]["inter_node_bw_per_gpu_Gbps"] = None
    row["hardware"].update(network="Omni-Path 4x100 Gb/s per node", nics_per_node=None)
    c = check_row(row)
    assert "50 Gb/s per GPU scale-out from hardware.network" in c.assumed
    assert c.predicted < check_row(_base()).predicted  # a quarter of the stated 200 Gb/s per GPU


def test_blackwell_ultra_rows_take_their_platform_defaults():
    # a GB300 NVL72 job: 4-GPU trays (64 of a rack's 72 GPUs for 256), one 800 Gb/s ConnectX-8 per GPU unless stated
    from wanka.plan.row_hardware import row_cluster

    assumed = []
    c = row_cluster({"id": "r", "hardware": {"gpu": "DGX-GB300", "gpu_count": 256}}, assumed)
    assert c.gpu.name == "gb300" and c.spec.scale_up.domain == 64 and c.spec.gpus_per_node == 4
    assert "800 Gb/s per GPU scale-out" in assumed
    b = row_cluster({"id": "r", "hardware": {"gpu": "DGX-B300", "gpu_count": 64, "inter_node_bw_per_gpu_Gbps": 400}})
    assert b.gpu.name == "b300" and b.spec.scale_up.domain == 8 and b.spec.scale_out.bandwidth_Gbps == 400
