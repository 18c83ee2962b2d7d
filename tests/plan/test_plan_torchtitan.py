"""torchtitan's published Llama 3.1 runs (plan/published_runs/torchtitan.json): every row is
priced with the torchtitan profile, and the mechanisms move the way the measurements do."""

from wanka.plan.published import check_row, framework_options, load_rows, row_layout, summary


def _checks():
    return {c.id: c for c in map(check_row, load_rows("torchtitan"))}


def test_every_row_is_priced_with_the_torchtitan_profile():
    rows = load_rows("torchtitan")
    checks = _checks()
    assert len(rows) == 18 and summary(list(checks.values()))["compared"] == 18
    for r in rows:
        opts = framework_options(r, row_layout(r)[0])
        assert opts.attention == "flash2"  # PyTorch SDPA's FlashAttention-2 kernels
        # "FSDP2" names PyTorch's FSDP version, not a shard group of 2 (it was read as HSDP dp_shard=2)
        assert row_layout(r)[0].dp_shard is None
    sac = next(r for r in rows if r["id"].endswith("8gpu_fsdp_compile_bf16"))
    assert framework_options(sac).recompute_modules == ("alternate_matmuls",)


def test_predictions_move_with_the_measurements():
    c = _checks()
    pre = "torchtitan_llama3.1-"
    # interleaving shrinks the bubble; AsyncTP hides TP communication (both measured faster)
    assert c[pre + "405b_512gpu_fsdp8_tp8_pp8_interleaved"].predicted > c[pre + "405b_512gpu_fsdp8_tp8_pp8_1f1b"].predicted
    assert c[pre + "70b_256gpu_fsdp32_tp8_2d_asynctp"].predicted > c[pre + "70b_256gpu_fsdp32_tp8_2d"].predicted
    # longer sequences on the same GPUs: fewer tokens/s, as measured
    cp = [c[pre + f"8b_8gpu_fsdp{8 // k}_cp{k}_seq{32768 * k}"] for k in (1, 2, 4, 8)]
    assert all(a.predicted > b.predicted and a.measured > b.measured for a, b in zip(cp, cp[1:]))


def test_alternate_matmuls_is_wk_wo_w3_of_a_block():
    from wanka.workload import load_model
    from wanka.workload.flops import alternate_matmul_fraction

    m = load_model("llama3-8b")  # h 4096, 8 KV heads of 128, FFN 14336
    h, kv, ffn = 4096, 8 * 128, 14336
    assert alternate_matmul_fraction(m) == (kv * h + h * h + ffn * h) / (h * h + 2 * kv * h + h * h + 3 * ffn * h)


def test_flash2_runs_attention_at_fa2s_hopper_rate():
    from wanka.hardware import gpu
    from wanka.plan.compute import layer_time
    from wanka.workload import load_model

    m = load_model("llama3-8b")
    for name, ratio in (("h100-sxm", 0.55 / 0.35), ("a100-80gb", 1.0)):  # FA3 paper: FA2 at 35% on H100
        fa3, fa2 = (layer_time(m, gpu(name), False, 1, 8192, 8192, 1, 1, False, "none", "bf16", k) for k in ("flash", "flash2"))
        assert fa2.attn_fwd_s / fa3.attn_fwd_s == __import__("pytest").approx(ratio, rel=1e-9)
