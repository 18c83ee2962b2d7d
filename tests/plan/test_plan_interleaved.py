"""What Megatron-Core's interleaved schedule hides (plan/interleaved.py): closed forms, and the
switches as the nemo-mlperf profile sets them from the submissions' configs."""

import dataclasses

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.dp_schedule import exposed_dp_s
from wanka.plan.estimate import estimate
from wanka.plan.exposure import DPComm, Options
from wanka.plan.frameworks import PROFILES
from wanka.plan.interleaved import chunk_grad_exposed_s, chunk_p2p_exposed_s, chunk_param_exposed_s
from wanka.errors import SpecError
from wanka.workload import load_model


def test_one_chunk_is_the_one_window_form():
    assert chunk_grad_exposed_s(3.0, 1, 8, 1.0) == pytest.approx(2.0)  # max(0, RS - bwd)
    assert chunk_param_exposed_s(1.5, 1, 8, 0.5) == pytest.approx(1.0)  # max(0, AG - fwd)
    assert chunk_grad_exposed_s(0.5, 1, 8, 1.0) == 0.0


def test_chunks_spread_the_reduction_over_the_cooldown():
    # vpp 4, pp 4: chunks end 4 chunk-backwards (of 0.25 s) apart; each chunk's reduce-scatter
    # (3/4 s) is launched as its last backward ends (delay/align_grad_reduce), behind the previous
    # chunk's on the one DP stream; chunk 0 ends last, so its reduction is exposed at least
    exposed = chunk_grad_exposed_s(3.0, 4, 4, 1.0)
    finish = float("-inf")
    for chunk in (3, 2, 1, 0):
        finish = max(finish, -chunk * 4 * 0.25) + 0.75
    assert exposed == pytest.approx(max(0.0, finish))
    assert exposed < 3.0 - 1.0  # less than the one-window form
    assert chunk_grad_exposed_s(0.8, 4, 4, 1.0) == pytest.approx(0.2)  # chunk 0's share, after the backward
    # a reduction longer than the gaps between chunk ends queues: 0.5 s each, 1 s apart -> chunk 0's 0.5
    assert chunk_grad_exposed_s(2.0, 4, 4, 1.0) == pytest.approx(0.5)
    assert chunk_grad_exposed_s(8.0, 4, 4, 1.0) == pytest.approx(8.0 - 3 * 1.0)  # the queue never drains


def test_param_gather_per_chunk():
    # chunk 0's quarter (0.5 s) against its first forward (0.125 s): 0.375 late, later chunks fit
    assert chunk_param_exposed_s(2.0, 4, 4, 0.5) == pytest.approx(0.375)
    assert chunk_param_exposed_s(0.4, 4, 4, 0.5) == 0.0
    assert chunk_param_exposed_s(2.0, 4, 4, 0.5, aligned=True) == pytest.approx(0.375)


def test_r08_param_gather_chains_buckets_inside_each_chunk():
    # core_r0.8.0 (no --delay-param-gather): one bucket in flight, the next dispatched when the forward
    # reaches the previous one. 4 chunks of 4 buckets (0.1 s each) under 0.05 s of forward per bucket:
    # chunk 0 waits for 0.1 + 3 x 0.05, each later chunk's first bucket came during chunk c-1's forwards
    per_chunk_fwd, vpp, pp = 4 * 0.05, 4, 4
    got = chunk_param_exposed_s(1.6, vpp, pp, vpp * per_chunk_fwd, bucket_s=0.1)
    assert got == pytest.approx((0.1 + 3 * 0.05) + 3 * (3 * 0.05))
    # vpp 1 is the one-window bucket chain of dp_schedule
    from wanka.plan.dp_schedule import bucketed_exposed_s
    assert chunk_param_exposed_s(0.4, 1, 4, 0.2, bucket_s=0.1) == pytest.approx(bucketed_exposed_s(0.4, 0.1, 0.2))
    # core_r0.9+ (--align-param-gather): chunk k+1 launched whole at chunk k's first forward, hidden here
    assert chunk_param_exposed_s(1.6, vpp, pp, vpp * per_chunk_fwd, bucket_s=0.1, aligned=True) < got


def test_megatron_profiles_sync_per_chunk_and_r08_rows_chain_the_gather():
    from wanka.plan.published import framework_options, load_rows, row_layout

    for name in ("megatron-core", "nemo", "megatron-lm"):
        o = PROFILES[name].options()
        assert (o.dp_sync_per_chunk, o.align_param_gather) == (True, True)
    assert PROFILES["nemo-mlperf"].options().dp_sync_per_chunk is False
    row = next(r for r in load_rows("calibration") if r["id"] == "mcore_h100_weak_70B")
    assert "r0.8.0" in row["parallelism"]["framework"]
    assert framework_options(row, row_layout(row)[0]).align_param_gather is False
    newer = dict(row, parallelism=dict(row["parallelism"], framework="Megatron-Core r0.10.0"))
    assert framework_options(newer, row_layout(newer)[0]).align_param_gather is True


def test_p2p_overlap_exposes_only_what_outlasts_a_chunk():
    assert chunk_p2p_exposed_s(0.01, 4, 0.2, 0.4) == 0.0
    assert chunk_p2p_exposed_s(0.08, 4, 0.2, 0.4) == pytest.approx(4 * (0.08 - 0.05))


def test_dp_schedule_uses_chunks_only_when_asked_and_interleaved():
    lay = Layout(tp=8, pp=4, vpp=4, dp=2, mbs=1, gbs=16, zero=1).resolve(64)
    dp = DPComm(3.0, 2.0, 0.0)
    one_window = exposed_dp_s(dp, lay, 0.5, 1.0, Options())
    chunked = exposed_dp_s(dp, lay, 0.5, 1.0, Options(dp_sync_per_chunk=True))
    assert one_window == pytest.approx((3.0 - 1.0) + (2.0 - 0.5))
    assert chunked == pytest.approx(chunk_grad_exposed_s(3.0, 4, 4, 1.0) + chunk_param_exposed_s(2.0, 4, 4, 0.5))
    flat = dataclasses.replace(lay, vpp=1)
    assert exposed_dp_s(dp, flat, 0.5, 1.0, Options(dp_sync_per_chunk=True)) == pytest.approx(one_window)


def test_pipeline_transfers_hide_under_the_chunks_in_the_estimate():
    m, c = load_model("gpt3-175b"), load_cluster("meta-24k-h100", gpus=512)
    lay = Layout.parse("tp=4,pp=8,vpp=4,mbs=2,gbs=512,precision=fp8")
    base = PROFILES["nemo"].options(lay)
    serial = estimate(m, c, lay, options=base)
    hidden = estimate(m, c, lay, options=dataclasses.replace(base, pp_p2p_overlap=True))
    assert serial.breakdown["pp_comm"] > 0 and hidden.breakdown["pp_comm"] < serial.breakdown["pp_comm"]
    assert hidden.step_time_s < serial.step_time_s
    # the fill and flush still wait for every transfer (NeMo communication_overlap.rst), each hop of the
    # vpp-chunk ring (plan/interleaved.fill_flush_p2p_s; tests/plan/test_plan_interleaved_fill.py)
    assert hidden.breakdown["pipeline_bubble"] > serial.breakdown["pipeline_bubble"]
    # vpp 1: overlap_p2p_comm does not apply
    flat = Layout.parse("tp=4,pp=8,vpp=1,mbs=2,gbs=512,precision=fp8")
    a = estimate(m, c, flat, options=base)
    b = estimate(m, c, flat, options=dataclasses.replace(base, pp_p2p_overlap=True))
    assert a.step_time_s == pytest.approx(b.step_time_s)


def test_nemo_mlperf_sets_the_submitted_switches():
    o = PROFILES["nemo-mlperf"].options()
    assert (o.pp_p2p_overlap, o.grad_bytes) == (True, 2)


def test_overlap_p2p_comm_follows_each_framework_default():
    # Megatron-LM's arguments default it on (since 2023-10, core_r0.4.0) and MindSpeed-LLM inherits
    # them; Megatron-Core's ModelParallelConfig defaults it off, so NeMo runs need their config to say so
    assert PROFILES["megatron-lm"].options().pp_p2p_overlap is True
    assert PROFILES["mindspeed"].options().pp_p2p_overlap is True
    assert PROFILES["megatron-core"].options().pp_p2p_overlap is False
    assert PROFILES["nemo"].options().pp_p2p_overlap is False
    assert PROFILES["megatron-lm-2021"].options().pp_p2p_overlap is False  # predates it


@pytest.mark.parametrize("stated, expected", [
    (None, False),
    ("TP comm overlap (userbuffers), overlap_p2p_comm, overlapped grad/param sync", True),
    ("overlap_p2p_comm: true (llama3.1_70b.yaml)", True),
    ("overlap_p2p_comm: False (nemotron4-340b-synth.yaml: batch_p2p_comm True instead)", False),
])
def test_a_run_states_overlap_p2p_comm(stated, expected):
    from wanka.plan.published import framework_options, load_rows, row_layout

    row = next(r for r in load_rows("dgxc") if r["id"] == "dgxc_llama3.1-70b_h100_512gpu_bf16_24.09")
    row = dict(row, parallelism=dict(row["parallelism"], comm_overlap=stated))
    lay = row_layout(row)[0]
    assert lay.vpp > 1
    assert framework_options(row, lay).pp_p2p_overlap is expected


def test_switches_are_validated():
    with pytest.raises(SpecError, match="options.pp_p2p_overlap"):
        Options(pp_p2p_overlap=1)
    with pytest.raises(SpecError, match="options.dp_sync_per_chunk"):
        Options(dp_sync_per_chunk="yes")
    with pytest.raises(SpecError, match="options.align_param_gather"):
        Options(align_param_gather=1)
