"""Mechanisms the MLPerf and MindSpeed sets brought in (docs/plan.md "Validate"), against closed forms:
FP8 parameters (memory), the SMs the overlapped DP collectives hold (dp_schedule), sliding-window
attention (flops, compute), and the framework profiles the submissions map to."""

import dataclasses

import pytest

from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.compute import layer_time
from wanka.plan.dp_schedule import overlap_sm_cost_s
from wanka.plan.exposure import DPComm, Options
from wanka.plan.frameworks import MLPERF_USERBUFFERS, PROFILES, family_of, userbuffers_hidden_fraction
from wanka.plan.memory import memory_per_gpu
from wanka.plan.published import load_rows
from wanka.plan.row_check import check_row
from wanka.hardware.catalog import gpu as catalog_gpu
from wanka.workload import load_model
from wanka.workload.flops import causal_pair_fraction

# memory_per_gpu's attention, recompute modules, FP8 activation cache and DualPipe defaults (positional:
# it is memoised by argument identity)
DEFAULTS = ("flash", ("core_attn",), True, False)


def test_fp8_parameters_keep_one_byte_per_weight():
    m = load_model("llama3-70b")
    lay = Layout(tp=8, pp=4, dp=4, mbs=1, gbs=64, zero=1, precision="fp8").resolve(128)
    plain = memory_per_gpu(m, lay, 8192)
    fp8p = memory_per_gpu(m, lay, 8192, *DEFAULTS, True)
    # a 16-bit weight plus its FP8 copy (3 bytes) becomes the FP8 weight alone (1 byte)
    assert fp8p.weights_GiB == pytest.approx(plain.weights_GiB / 3)
    assert (fp8p.gradients_GiB, fp8p.optimizer_GiB, fp8p.activations_GiB) == pytest.approx(
        (plain.gradients_GiB, plain.optimizer_GiB, plain.activations_GiB))
    # BF16 runs have no FP8 weights to keep: the switch changes nothing
    bf16 = dataclasses.replace(lay, precision="bf16")
    assert memory_per_gpu(m, bf16, 8192, *DEFAULTS, True) == memory_per_gpu(m, bf16, 8192)


def test_sms_held_by_overlapped_collectives_closed_form():
    lay = Layout(tp=1, pp=1, dp=32, mbs=1, gbs=32, zero=1).resolve(32)
    dp, fwd, bwd = DPComm(0.10, 0.04, 0.0), 0.05, 0.08
    opts = Options(dp_comm_ctas=16)
    f = 16 / 148
    # overlapped compute: min(RS, bwd) + min(AG, fwd) = 0.08 + 0.04, slowed by f / (1 - f)
    assert overlap_sm_cost_s(dp, lay, fwd, bwd, opts, 148) == pytest.approx((0.08 + 0.04) * f / (1 - f))
    assert overlap_sm_cost_s(dp, lay, fwd, bwd, Options(), 148) == 0.0  # CTAs not modelled
    assert overlap_sm_cost_s(dp, lay, fwd, bwd, opts, None) == 0.0  # SM count not in the catalog
    no_overlap = Options(dp_comm_ctas=16, dp_overlap=False)  # exposed collectives hold no compute SMs
    assert overlap_sm_cost_s(dp, lay, fwd, bwd, no_overlap, 148) == 0.0


def test_sliding_window_pair_fraction_and_attention_time():
    s, w = 32768, 4096
    assert causal_pair_fraction(s, None) == causal_pair_fraction(s, s) == 0.5
    assert causal_pair_fraction(s, w) == pytest.approx((w * s - w * (w - 1) / 2) / s ** 2)
    assert causal_pair_fraction(4, 2) == pytest.approx((1 + 2 + 2 + 2) / 16)  # counted by hand
    base = load_model("llama3-8b")
    windowed = base.model_copy(update={"sliding_window": w})
    g = catalog_gpu("h100-sxm")
    full = layer_time(base, g, False, 1, s, s, 8, 1, True, "none", "bf16", "flash")
    band = layer_time(windowed, g, False, 1, s, s, 8, 1, True, "none", "bf16", "flash")
    assert band.attn_fwd_s < full.attn_fwd_s / 3  # ~4.3x fewer pairs, shorter kernels
    assert band.fwd_s - band.attn_fwd_s == pytest.approx(full.fwd_s - full.attn_fwd_s)  # GEMMs unchanged


def test_new_options_are_validated():
    with pytest.raises(SpecError, match="options.dp_comm_ctas"):
        Options(dp_comm_ctas=-1)
    with pytest.raises(SpecError, match="options.fp8_params"):
        Options(fp8_params="yes")


def test_submissions_map_to_their_profiles():
    assert family_of("NeMo 24.04 (Megatron-Core), MLPerf Training v4.0") == "nemo-mlperf"
    assert family_of("MindSpeed-LLM 2024-09 (Megatron-Core models on Ascend, torch_npu)") == "mindspeed"
    assert family_of("NeMo 24.12") == "megatron-core"  # a NeMo recipe is not a submission


def test_mlperf_runs_fit_in_memory_as_they_ran():
    checks = [check_row(r) for r in load_rows("mlperf")]
    assert all(c.fits for c in checks), [c.id for c in checks if not c.fits]


def test_training_runtime_refuses_a_window_it_would_not_apply():
    from wanka.model.decoder import Transformer

    tiny = load_model("tiny")
    with pytest.raises(SpecError, match="model.sliding_window"):
        Transformer(tiny.model_copy(update={"sliding_window": tiny.seq_len // 2}))
    Transformer(tiny.model_copy(update={"sliding_window": tiny.seq_len}))  # a window as long as the sequence: full causal


def test_userbuffers_hidden_fraction_from_the_per_gemm_methods():
    # 8 collectives per layer; 7 ring-exchange/bulk (hidden whole), proj_fprop pipelined in 4 splits (3/4)
    assert userbuffers_hidden_fraction(MLPERF_USERBUFFERS) == pytest.approx((7 + 3 / 4) / 8)
    assert userbuffers_hidden_fraction({"a": ("pipeline", 2), "b": ("bulk", 1)}) == pytest.approx(0.75)
    assert PROFILES["nemo-mlperf"].options().tp_overlap == pytest.approx(31 / 32)
