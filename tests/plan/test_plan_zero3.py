"""ZeRO-3 / FSDP: unit-by-unit gathers, one unit ahead of the compute (wanka.plan.zero3)."""

import dataclasses
import itertools
import math

import pytest

from wanka.cluster import load_cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan import Options, estimate
from wanka.plan.zero3 import Unit, exposed_s, layer_units, microbatch_exposed_s, recompute_kept
from wanka.workload import load_model


def test_each_gather_hides_under_the_unit_before_it():
    # (compute, gather, reduce-scatter, weight): the first gather (2) has nothing to hide under;
    # unit 0 computes 1 s while unit 1 gathers 3 s -> 2 s exposed; unit 1 hides unit 2's 1 s gather
    items = [(1.0, 2.0, 0.0, 1.0), (1.0, 3.0, 0.0, 1.0), (5.0, 1.0, 0.0, 1.0)]
    assert exposed_s(items, grad_overlap=True) == pytest.approx(2.0 + 2.0)


def test_reduce_scatters_overlap_the_next_unit_or_are_exposed():
    items = [(4.0, 1.0, 2.0, 1.0), (4.0, 1.0, 2.0, 1.0), (4.0, 1.0, 2.0, 1.0)]
    # overlapped: unit j hides gather j+1 (1) + reduce-scatter j-1 (2) -> nothing, the last RS ends the pass
    assert exposed_s(items, grad_overlap=True) == pytest.approx(1.0 + 2.0)
    # on the compute stream: every reduce-scatter is exposed
    assert exposed_s(items, grad_overlap=False) == pytest.approx(1.0 + 3 * 2.0)


def test_a_run_of_identical_layers_is_priced_exactly_in_compressed_form():
    a = [Unit(1.0, 2.0, 5.0, 0.0), Unit(0.2, 0.4, 20.0, 0.0), Unit(3.0, 6.0, 1.0, 0.0)]
    b = [Unit(2.0, 4.0, 7.0, 3.0)]
    extra = Unit(0.0, 0.0, 9.0, 0.0)
    gather = lambda u: 0.1 * (u.dense_params + u.expert_params)  # noqa: E731
    rs = lambda u: 0.05 * (u.dense_params + u.expert_params)  # noqa: E731
    for recompute, overlap, keep in itertools.product((False, True), repeat=3):
        compressed = microbatch_exposed_s([(a, 7), (b, 5)], extra, recompute, gather, rs, overlap, keep)
        expanded = microbatch_exposed_s([(a, 1)] * 7 + [(b, 1)] * 5, extra, recompute, gather, rs, overlap, keep)
        assert compressed == pytest.approx(expanded, rel=1e-12)


def test_weight_units_split_a_layer_by_gemm_flops_and_keep_its_parameters():
    m = load_model("gpt3-175b")
    h = m.hidden
    units = layer_units(m, False, 1.0, 2.0, 0.1, 1, 1, "weight")
    # QKV, the attention core (no parameters: never gathered), out-projection, MLP up, MLP down
    assert [u.dense_params for u in units] == [3 * h * h, 0, h * h, 4 * h * h, 4 * h * h]
    assert sum(u.fwd_s for u in units) == pytest.approx(1.0)
    assert sum(u.bwd_s for u in units) == pytest.approx(2.0)
    assert units[0].fwd_s == pytest.approx(0.9 * 3 / 12) and units[1].fwd_s == pytest.approx(0.1)
    (layer,) = layer_units(m, False, 1.0, 2.0, 0.1, 8, 1, "layer")
    assert layer.dense_params == pytest.approx(12 * h * h / 8)


@pytest.fixture(scope="module")
def fsdp_case():
    return load_model("llama3-8b"), load_cluster("meta-24k-h100", gpus=64)


def test_fsdp_on_a_fast_network_hides_its_gathers(fsdp_case):
    m, c = fsdp_case
    z1 = estimate(m, c, Layout.parse("dp=64,mbs=2,gbs=512,zero=1"))
    z3 = estimate(m, c, Layout.parse("dp=64,mbs=2,gbs=512,zero=3"))
    assert z3.breakdown["dp_comm"] < 0.05 * z3.step_time_s
    assert z3.step_time_s == pytest.approx(z1.step_time_s, rel=0.05)
    not_overlapped = estimate(m, c, Layout.parse("dp=64,mbs=2,gbs=512,zero=3"), options=Options(dp_overlap=False))
    assert not_overlapped.breakdown["dp_comm"] > 5 * z3.breakdown["dp_comm"]


def test_deepspeed_style_weight_units_expose_more_than_fsdp_blocks(fsdp_case):
    m, c = fsdp_case
    lay = Layout.parse("dp=64,mbs=1,gbs=64,zero=3")
    flat = Options(algorithm="flat-ring")
    block = estimate(m, c, lay, options=flat)
    weight = estimate(m, c, lay, options=dataclasses.replace(flat, zero3_unit="weight"))
    eager = estimate(m, c, lay, options=dataclasses.replace(flat, zero3_unit="weight", zero3_grad_overlap=False))
    assert block.breakdown["dp_comm"] < weight.breakdown["dp_comm"] < eager.breakdown["dp_comm"]


def test_bad_zero3_unit_is_named(fsdp_case):
    m, c = fsdp_case
    with pytest.raises(SpecError, match="zero3_unit"):
        estimate(m, c, Layout.parse("dp=64,gbs=64,zero=3"), options=Options(zero3_unit="module"))
    with pytest.raises(SpecError, match="zero3_unit"):  # checked whatever the ZeRO stage
        estimate(m, c, Layout.parse("dp=64,gbs=64,zero=1"), options=Options(zero3_unit="module"))


def test_hsdp_gathers_in_the_shard_group_and_all_reduces_across_replicas():
    m, c = load_model("llama3-70b"), load_cluster("meta-24k-h100", gpus=512)
    lay = "dp=512,mbs=1,gbs=512,zero=3,recompute=full"
    flat = Options(algorithm="flat-ring")  # latency grows with the ring, so the shard group matters
    full = estimate(m, c, Layout.parse(lay), options=flat)
    hsdp = estimate(m, c, Layout.parse(lay + ",dp_shard=64"), options=flat)
    assert hsdp.breakdown["dp_comm"] < full.breakdown["dp_comm"]
    assert hsdp.memory_GB_per_gpu > full.memory_GB_per_gpu  # optimizer states over 64, not 512
    # one replica per shard group: HSDP with dp_shard = dp is plain FSDP
    same = estimate(m, c, Layout.parse(lay + ",dp_shard=512"), options=flat)
    assert same.step_time_s == pytest.approx(full.step_time_s, rel=1e-12)


def test_fsdp2_keeps_the_root_and_last_block_gathered_into_the_backward():
    # three identical layers (gather 1 s, reduce-scatter 0.5 s each) and a root unit (gather 2 s,
    # reduce-scatter 1 s); compute long enough to hide everything that can hide
    layer, root = Unit(100.0, 200.0, 10.0, 0.0), Unit(0.0, 0.0, 20.0, 0.0)
    gather = lambda u: 0.1 * u.dense_params  # noqa: E731
    rs = lambda u: 0.05 * u.dense_params  # noqa: E731
    for recompute in (False, True):
        exposed, total = microbatch_exposed_s([((layer,), 3)], root, recompute, gather, rs, True, keep_unsharded=True)
        # forward 2 + 3 x 1; backward gathers only the two blocks that were resharded, once each even
        # when a checkpointed block replays its forward; every reduce-scatter once
        assert total == pytest.approx(5.0 + 2.0 + 3 * 0.5 + 1.0)
        # the forward's root and first-block gathers (nothing computes before them), then layer 0's and
        # the root's reduce-scatters after the backward
        assert exposed == pytest.approx(2.0 + 1.0 + 0.5 + 1.0)
        plain, plain_total = microbatch_exposed_s([((layer,), 3)], root, recompute, gather, rs, True)
        # without: the root and the last block are gathered again at the start of the backward, and the
        # root's reduce-scatter hides under the last block's backward
        assert plain == pytest.approx(2.0 + 1.0 + 2.0 + 1.0 + 0.5)
        assert plain_total == pytest.approx(5.0 + 2.0 + 3.0 * (2 if recompute else 1) + 3 * 0.5 + 1.0)


def test_the_torchtitan_profile_keeps_fsdp2_units_gathered():
    from wanka.plan.frameworks import framework

    assert framework("torchtitan").options().fsdp2_keep_unsharded is True
    assert Options().fsdp2_keep_unsharded is False
    with pytest.raises(SpecError, match="fsdp2_keep_unsharded"):
        Options(fsdp2_keep_unsharded="yes")
def test_deepspeed_keeps_the_last_weights_of_a_layer_from_recompute_to_backward():
    # stage3_max_reuse_distance 1e9: between a weight's recomputed forward and its backward run the
    # forward and backward of the weights after it; GPT-3 175B's MLP down (4h^2 = 6.0e8) has none
    # after it, the MLP up has 2 x 6.0e8 = 1.2e9 > 1e9 after it
    units = layer_units(load_model("gpt3-175b"), False, 1.0, 2.0, 0.1, 1, 1, "weight")
    assert recompute_kept(units, 1e9) == [False, False, False, False, True]
    assert recompute_kept(units, 0.0) == [False] * 5
    assert recompute_kept(units, math.inf) == [True, False, True, True, True]  # the core has nothing to keep


def test_kept_weights_are_not_gathered_again_in_the_backward():
    a = (Unit(1.0, 2.0, 4.0, 0.0), Unit(1.0, 2.0, 4.0, 0.0))
    extra = Unit(0.0, 0.0, 0.0, 0.0)
    gather = lambda u: u.dense_params  # noqa: E731  (1 s per parameter unit)
    rs = lambda u: 0.0  # noqa: E731
    _, released = microbatch_exposed_s([(a, 3)], extra, True, gather, rs, True, reuse_distance=0.0)
    _, kept = microbatch_exposed_s([(a, 3)], extra, True, gather, rs, True, reuse_distance=1.0)
    # three gathers per weight (forward, recomputed forward, backward) -> two for the kept last weight
    assert released == pytest.approx(3 * 2 * 3 * 4.0)
    assert kept == pytest.approx(released - 3 * 4.0)


def test_prefetch_waits_while_too_many_parameters_are_gathered():
    # (compute, gather, reduce-scatter, weight, live parameters): the second unit's gather (3 s) hides
    # under the first unit's 4 s unless the first unit alone holds max_live; then only under the
    # parameter-less item after it (1 s)
    items = [(4.0, 1.0, 0.0, 1.0, 10.0), (1.0, 0.0, 0.0, 1.0, 0.0), (2.0, 3.0, 0.0, 1.0, 5.0)]
    assert exposed_s(items, True) == pytest.approx(1.0)
    assert exposed_s(items, True, max_live=20.0) == pytest.approx(1.0)
    assert exposed_s(items, True, max_live=10.0) == pytest.approx(1.0 + 2.0)
    items[1] = (1.0, 0.0, 0.0, 1.0, 12.0)  # a weight kept gathered through the parameter-less item
    assert exposed_s(items, True, max_live=10.0) == pytest.approx(1.0 + 3.0)


def test_the_deepspeed_profile_prices_stage_3_with_its_defaults():
    from wanka.plan.frameworks import framework

    opts = framework("deepspeed").options(Layout.parse("dp=64,gbs=64,zero=3"))
    assert opts.zero3_unit == "weight" and opts.zero3_reuse_distance == 1e9 and opts.zero3_grad_overlap
    assert opts.zero3_max_live_params is None
    assert framework("fsdp").options(Layout.parse("dp=64,gbs=64,zero=3")).zero3_reuse_distance == 0.0
