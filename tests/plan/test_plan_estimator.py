"""Behaviour of the estimator that must hold whatever the constants."""

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan import Options, estimate
from wanka.plan.flops import model_flops_per_token
from wanka.workload import load_model

KEYS = {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "tflops_per_gpu",
        "memory_GB_per_gpu", "fits", "breakdown"}


@pytest.fixture(scope="module")
def setup():
    return load_model("llama3-70b"), load_cluster("meta-24k-h100", gpus=512)


def test_mfu_formula_is_6n_plus_attention():
    m = load_model("gpt3-175b")
    n = 96 * (4 * 12288 * 12288 + 4 * 12288 + 2 * 12288 * 49152 + 49152 + 12288) + 51200 * 12288
    assert model_flops_per_token(m, 2048) == pytest.approx(6 * n + 12 * 96 * 12288 * 2048, rel=1e-12)


def test_bubble_follows_the_schedule(setup):
    m, c = setup
    e1 = estimate(m, c, Layout.parse("tp=8,pp=8,gbs=512"))
    e2 = estimate(m, c, Layout.parse("tp=8,pp=8,vpp=2,gbs=512"))
    mb = e1.layout.microbatches
    per_mb = e1.breakdown["pipeline_bubble"] / 7
    assert e1.breakdown["pipeline_bubble"] == pytest.approx(7 * per_mb)
    assert e2.breakdown["pipeline_bubble"] < 0.6 * e1.breakdown["pipeline_bubble"]  # (pp-1)/vpp
    assert e1.breakdown["pipeline_bubble"] / e1.step_time_s == pytest.approx(7 / (mb + 7), rel=0.1)


def test_json_keys_and_consistency(setup):
    m, c = setup
    e = estimate(m, c, Layout.parse("tp=8,pp=4,gbs=256,recompute=full"))
    d = e.to_dict()
    assert KEYS <= set(d)
    assert d["tokens_per_s"] == pytest.approx(256 * m.seq_len / d["step_time_s"])
    assert d["hfu"] > d["mfu"]  # full recompute executes an extra forward
    assert sum(d["breakdown"].values()) == pytest.approx(d["step_time_s"], rel=1e-9)


def test_memory_falls_with_zero_stage_and_recompute(setup):
    m, c = setup
    mem = [estimate(m, c, Layout.parse(f"tp=8,pp=4,gbs=256,zero={z}")).memory_GB_per_gpu for z in (0, 1, 2, 3)]
    assert mem == sorted(mem, reverse=True) and mem[0] > mem[3]
    none = estimate(m, c, Layout.parse("tp=8,pp=4,gbs=256,recompute=none"))
    full = estimate(m, c, Layout.parse("tp=8,pp=4,gbs=256,recompute=full"))
    assert full.memory["activations"] < none.memory["activations"] / 5
    assert full.step_time_s > none.step_time_s


def test_fp8_is_faster_but_not_twice(setup):
    m, c = setup
    bf16 = estimate(m, c, Layout.parse("tp=8,pp=4,gbs=256"))
    fp8 = estimate(m, c, Layout.parse("tp=8,pp=4,gbs=256,precision=fp8"))
    assert 1.2 < bf16.step_time_s / fp8.step_time_s < 2.0


def test_topology_unaware_collectives_are_slower(setup):
    m, c = setup
    lay = Layout.parse("tp=8,pp=2,gbs=128")
    aware = estimate(m, c, lay)
    flat = estimate(m, c, lay, options=Options(algorithm="flat-ring"))
    assert flat.step_time_s > aware.step_time_s


def test_moe_expert_parallelism_prices_all_to_all():
    m = load_model("mixtral-8x7b")
    c = load_cluster("wanka-10k", gpus=256)
    e = estimate(m, c, Layout.parse("tp=2,pp=2,ep=8,gbs=512"))
    assert e.breakdown["ep_comm"] > 0 and e.fits in (True, False)
    dense_ep1 = estimate(m, c, Layout.parse("tp=2,pp=2,ep=1,gbs=512"))
    assert dense_ep1.breakdown["ep_comm"] == 0
    assert e.memory["weights"] < dense_ep1.memory["weights"]


def test_context_parallelism_cuts_activations():
    m = load_model("llama3-8b")
    c = load_cluster("wanka-10k", gpus=64)
    one = estimate(m, c, Layout.parse("tp=1,cp=1,gbs=64"), seq_len=32768)
    four = estimate(m, c, Layout.parse("tp=1,cp=4,gbs=64"), seq_len=32768)
    assert four.memory["activations"] < one.memory["activations"] / 3
    assert four.breakdown["cp_comm"] >= 0


def test_bad_options_are_spec_errors(setup):
    from wanka.errors import SpecError

    m, c = setup
    for bad in ({"pipeline": "zigzag"}, {"comm_sm_fraction": 1.0}):  # refused on construction
        with pytest.raises(SpecError):
            Options(**bad)
    with pytest.raises(SpecError):  # dualpipe needs pp >= 2: refused when priced
        estimate(m, c, Layout.parse("tp=8,gbs=64"), options=Options(pipeline="dualpipe"))
