"""When frameworks reduce gradients (plan/dp_schedule.py, plan/frameworks.py): closed forms.

Megatron's distributed optimizer reduce-scatters once per step whatever the number of
micro-batches; DeepSpeed ZeRO-2 and FSDP without no_sync reduce-scatter every micro-batch, each
hidden under that micro-batch's backward; DeepSpeed's pipeline engine reduces once, exposed.
"""

import dataclasses
import json

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.dp_schedule import exposed_dp_s
from wanka.plan.estimate import estimate
from wanka.plan.exposure import DPComm, Options
from wanka.plan.frameworks import PROFILES, family_of, framework
from wanka.workload import load_model


@pytest.fixture(scope="module")
def setup():
    return load_model("llama3-70b"), load_cluster("meta-24k-h100", gpus=256)


def _dp_exposed(setup, layout: str, profile: str) -> float:
    m, c = setup
    lay = Layout.parse(layout)
    return estimate(m, c, lay, options=framework(profile).options(lay)).breakdown["dp_comm"]


def test_exposed_dp_closed_forms():
    lay = Layout(tp=8, pp=1, dp=4, mbs=1, gbs=16, zero=2).resolve(32)  # m = 4 micro-batches
    rs, ag, fwd, bwd = 3.0, 1.5, 0.5, 1.0
    once = DPComm(rs, ag, 0.0)
    every = DPComm(rs, ag, rs)
    over = Options()
    assert exposed_dp_s(once, lay, fwd, bwd, over) == pytest.approx((rs - bwd) + (ag - fwd))
    assert exposed_dp_s(every, lay, fwd, bwd, over) == pytest.approx(4 * (rs - bwd) + (ag - fwd))
    assert exposed_dp_s(once, lay, fwd, bwd, Options(dp_overlap=False)) == pytest.approx(rs + ag)
    assert exposed_dp_s(every, lay, fwd, bwd, Options(dp_overlap=False)) == pytest.approx(4 * rs + ag)
    # DeepSpeed ZeRO-1/2: the all-gather after step() is exposed even when reductions overlap
    assert exposed_dp_s(once, lay, fwd, bwd, Options(param_gather_overlap=False)) == pytest.approx((rs - bwd) + ag)
    # a reduce-scatter shorter than the backward is hidden
    assert exposed_dp_s(DPComm(0.4, 0.2, 0.4), lay, fwd, bwd, over) == 0.0


def test_megatron_reduces_once_per_step_fsdp_every_microbatch(setup):
    # zero=2, pp=1, tp=8 on 256 GPUs: dp=32, micro-batches m = gbs/32
    mega = [_dp_exposed(setup, f"tp=8,pp=1,gbs={32 * m},zero=2", "megatron-core") for m in (2, 4, 8)]
    fsdp = [_dp_exposed(setup, f"tp=8,pp=1,gbs={32 * m},zero=2", "fsdp") for m in (2, 4, 8)]
    assert mega[0] == pytest.approx(mega[1]) == pytest.approx(mega[2])  # once per step
    # m * g + a: the step's exposed DP grows by the same g per micro-batch
    assert fsdp[2] - fsdp[1] == pytest.approx(2 * (fsdp[1] - fsdp[0]), rel=1e-6)
    assert fsdp[1] - fsdp[0] > 0
    # Megatron's zero=2 is its distributed optimizer: the same schedule as zero=1
    assert mega[1] == pytest.approx(_dp_exposed(setup, "tp=8,pp=1,gbs=128,zero=1", "megatron-core"))


def test_pipeline_stages_sync_once_per_step_and_deepspeeds_engine_exposes_it(setup):
    m, c = setup
    lay = Layout.parse("tp=8,pp=4,gbs=256,zero=2")
    once = estimate(m, c, lay, options=Options(grad_sync="per_step")).breakdown["dp_comm"]
    # torch.distributed.pipelining syncs FSDP gradients at the last backward only (the FSDP profile's
    # FlashAttention-2 kernels lengthen the backward the reduction hides under: compared with them)
    fa2_once = estimate(m, c, lay, options=Options(grad_sync="per_step", attention="flash2")).breakdown["dp_comm"]
    assert _dp_exposed(setup, str(lay), "fsdp") == pytest.approx(fa2_once)
    ds = _dp_exposed(setup, str(lay), "deepspeed")
    exposed = estimate(m, c, lay, options=Options(grad_sync="per_step", dp_overlap=False,
                                                  grad_bytes=2)).breakdown["dp_comm"]
    assert ds == pytest.approx(exposed) and ds > once


def test_every_profile_switch_is_an_option_with_a_source():
    fields = {f.name for f in dataclasses.fields(Options)}
    for p in PROFILES.values():
        for switches in (p.switches, p.pipeline_switches, *p.zero_switches.values()):
            assert set(switches) <= fields, p.name
            assert set(switches) <= set(p.sources), (p.name, set(switches) - set(p.sources))
        assert isinstance(p.options(Layout.parse("tp=1")), Options)


@pytest.mark.parametrize("text,zero,family", [
    ("NeMo 24.12 (NeMo Launcher)", None, "megatron-core"),
    ("Megatron-Bridge (llmb recipe)", None, "megatron-core"),
    ("MaxText (JAX) 25.01 container", None, "jax-xla"),
    ("Megatron-LM (2021)", "none", "megatron-lm"),  # validate takes megatron-lm-2021 for rows dated <= 2022
    ("Megatron-LM / DeepSpeed ZeRO-3 (2021)", "none", "megatron-lm"),
    ("Megatron-LM / DeepSpeed ZeRO-3 (2021)", "ZeRO-3 via DeepSpeed", "deepspeed"),
    ("Megatron-DeepSpeed (BigScience fork)", "ZeRO-1", "megatron-deepspeed"),
    ("torchtitan (FSDP2)", None, "torchtitan"),
    ("MegaScale (Megatron-LM based)", None, "megascale"),
    ("metaseq (FSDP)", None, "fsdp"),
    ("in-house", None, None),
    # no stack named: PyTorch FSDP read from the sharding field's own terms; other sharding is no profile
    ("PyTorch 2.1", "FSDP FULL_SHARD", "fsdp"), ("Composer", "SHARD_GRAD_OP", "fsdp"), (None, "HSDP", "fsdp"),
    ("custom trainer", "fully sharded data parallel", "fsdp"), ("Colossal-AI", "ZeRO-3", None),
    ("PyTorch DDP", "none", None), ("NeMo 2.0", "Megatron FSDP", "megatron-core"),
])
def test_published_framework_text_maps_to_a_profile(text, zero, family):
    assert family_of(text, zero) == family


def test_cli_framework_flag(run_cli):
    argv = ["plan", "--model", "llama3-70b", "--cluster", "meta-24k-h100", "--gpus", "256",
            "--layout", "tp=8,pp=1,gbs=128,zero=2", "--json"]
    out = {}
    for name in ("megatron-core", "deepspeed"):
        rc, stdout, _ = run_cli(*argv, "--framework", name)
        assert rc == 0
        out[name] = json.loads(stdout)["breakdown"]["dp_comm"]
    assert out["deepspeed"] > out["megatron-core"]
    rc, _, err = run_cli(*argv, "--framework", "megatron")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--framework" in err and "megatron-core" in err


@pytest.mark.parametrize("framework_text, attention, grad_sync", [
    ("Megatron-LM (2024)", "flash", "per_step"), ("Megatron-LM", "flash", "per_step"),
    ("Megatron-LM (2021)", "unfused", "per_step"), ("PyTorch FSDP (2023)", "flash2", "auto")])
def test_validate_rows_reduce_as_their_framework_does(framework_text, attention, grad_sync):
    from wanka.plan.published import framework_options

    row = {"parallelism": {"framework": framework_text, "zero_or_fsdp": "ZeRO-2"}, "architecture": {}}
    opts = framework_options(row, Layout.parse("tp=8,pp=1,gbs=256,zero=2"))
    assert (opts.attention, opts.grad_sync, opts.tp_overlap) == (attention, grad_sync, 0.0)
