"""DeepEP / HybridEP inside one NVLink domain (plan/flex_intranode.py): the benchmark's own configuration
reproduces its published rates, the table is read between and beyond its points as documented, and the
estimator uses it for flex layouts that stay inside a domain and only for those."""


import pytest

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.layout import Layout
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.plan.flex_intranode import flex_rates_GBps, intra_domain_flex_comm_s
from wanka.plan.hier_dispatch import expected_distinct_units
from wanka.workload.spec import ModelSpec, MoESpec


# README_Hybrid-EP.md @94a9f8f6: 4,096 tokens per rank, hidden 7,168, top-8, 8 local experts, uniform routing
TOKENS, HIDDEN, TOP_K, LOCAL = 4096, 7168, 8, 8


@pytest.mark.parametrize("part, backend, ranks, sms, dispatch_GBps, combine_GBps", [
    ("gb200", "hybridep", 8, 32, 545.71, 568.94),
    ("gb200", "hybridep", 32, 16, 485.50, 423.19),
    ("b200", "hybridep", 8, 16, 535.94, 530.86),
    ("b200", "deepep", 8, 24, 494, 420),
])
def test_the_benchmark_configuration_gives_back_the_published_time(part, backend, ranks, sms, dispatch_GBps,
                                                                   combine_GBps):
    # received copies = tokens x distinct destination ranks (checked against a sampled router in
    # test_plan_hier_dispatch.py for the benchmark's 8 and 32 ranks)
    distinct = expected_distinct_units(TOP_K, LOCAL * ranks, ranks)
    received = TOKENS * distinct * HIDDEN * 2  # BF16 bytes, as tests/test_hybrid_ep.py counts them
    want = received / (dispatch_GBps * 1e9) + received / (combine_GBps * 1e9)
    got = intra_domain_flex_comm_s(part, backend, ranks, sms, TOKENS, HIDDEN, 2, distinct, 1.0)
    assert got == pytest.approx(want, rel=1e-9)
    # FP8 dispatch: 1 byte and a 4-byte scale per 128 values at the FP8 column's rate; combine stays BF16
    fp8 = intra_domain_flex_comm_s(part, backend, ranks, sms, TOKENS, HIDDEN, 1, distinct, 1.0)
    disp_fp8 = flex_rates_GBps(backend, part, ranks, sms)[1]
    assert fp8 == pytest.approx(received / 2 * (1 + 4 / 128) / (disp_fp8 * 1e9) + received / (combine_GBps * 1e9))


def test_rates_between_and_beyond_the_measured_points():
    lo, hi = flex_rates_GBps("deepep", "b200", 8, 16), flex_rates_GBps("deepep", "b200", 8, 24)
    mid = flex_rates_GBps("deepep", "b200", 8, 20)  # DeepEP's default 20 SMs: halfway
    assert mid == pytest.approx(tuple((a + b) / 2 for a, b in zip(lo, hi)))
    assert flex_rates_GBps("hybridep", "gb200", 64, 32) == flex_rates_GBps("hybridep", "gb200", 36, 32)
    assert flex_rates_GBps("hybridep", "gb200", 8, 64) == flex_rates_GBps("hybridep", "gb200", 8, 32)
    between = flex_rates_GBps("hybridep", "gb200", 12, 32)
    assert between[0] == pytest.approx((545.71 + 523.48) / 2)
    for part in ("h100-sxm", "gb300", "b300", "mi300x"):  # no published figures: the flat all-to-all prices them
        assert flex_rates_GBps("hybridep", part, 8, 32) is None
        assert intra_domain_flex_comm_s(part, "hybridep", 8, 32, TOKENS, HIDDEN, 2, 5.0, 1.0) is None


def _moe_model() -> ModelSpec:
    return ModelSpec(name="moe-test", layers=8, hidden=2048, heads=16, ffn_hidden=6144, vocab=32000, seq_len=4096,
                     moe=MoESpec(experts=128, top_k=8, ffn_hidden=768))


def _ep_comm(part: str, gpus: int, ep: int, backend: str | None) -> float:
    cluster = Cluster(parse_cluster_spec({"name": "t", "gpu": part, "gpus": gpus}))
    lay = Layout(tp=1, pp=1, ep=ep, mbs=1, gbs=gpus * 4, precision="bf16")
    opts = Options(moe_flex_backend=backend, moe_dispatcher_sms=32)
    return estimate(_moe_model(), cluster, lay, options=opts).breakdown["ep_comm"]


def test_the_estimator_prices_flex_inside_a_domain_at_the_published_rates():
    flat, hybrid = _ep_comm("gb200", 72, 8, None), _ep_comm("gb200", 72, 8, "hybridep")
    # EP 8 on GB200: 128 experts top-8 reach 5.25 of 8 ranks, moved at ~546/569 GB/s -> cheaper than the flat
    # all-to-all's 8 copies, by less than the copy ratio (the kernels run below the NVLink rate)
    assert hybrid < flat < hybrid * 8 / expected_distinct_units(8, 128, 8)
    # an H100 node has no published intranode figure: the kernels' bytes (one copy per destination rank, 5.25
    # of top-8's 8) are priced at the flat all-to-all's rate there -- fewer bytes than the flat dispatcher's
    # top_k copies, and no cheaper than their share of it (the all-to-all's fixed costs do not shrink)
    flat_h100, flex_h100 = _ep_comm("h100-sxm", 8, 8, None), _ep_comm("h100-sxm", 8, 8, "hybridep")
    assert flat_h100 * expected_distinct_units(8, 128, 8) / 8 <= flex_h100 < flat_h100
    assert _ep_comm("h100-sxm", 8, 8, "deepep") == pytest.approx(flex_h100)  # no rates: the backend does not matter
