import pytest

from wanka.errors import SpecError
from wanka.hardware import gpu, gpu_names, nic, nic_names
from wanka.hardware.catalog import DTYPES

REQUIRED = ["a100-40gb", "a100-80gb", "a800", "h100-sxm", "h800", "h20", "h200", "b200", "gb200", "b300", "gb300",
            "mi300x", "ascend-910b", "ascend-910c", "mtt-s4000"]


def test_required_accelerators_present():
    assert set(REQUIRED) <= set(gpu_names())


@pytest.mark.parametrize("name", REQUIRED)
def test_every_figure_is_sourced_and_sane(name):
    g = gpu(name)
    assert {"compute", "memory", "power", "scale_up"} <= set(g.sources), "each group of figures cites a source"
    assert all(len(text) > 10 for text in g.sources.values())
    bf16 = g.peak("bf16")
    # tensor-core ordering that holds on every listed part: fp32 < bf16 <= fp8
    if g.peak_tflops.fp32 is not None:
        assert g.peak_tflops.fp32 < bf16
    if g.peak_tflops.fp8 is not None:
        assert g.peak_tflops.fp8 >= bf16
    assert 16 <= g.hbm_GB <= 512
    assert g.scale_up.domain in (8, 72, 384)
    if g.node_gpus is not None or g.scale_out_Gbps is not None:  # the usual platform cites its server document
        assert len(g.sources.get("node", "")) > 10
        assert g.scale_up.domain % g.node_gpus == 0 and g.scale_out_Gbps in (200, 400, 800)


def test_published_anchor_figures():
    # H100 SXM dense BF16 989.4 TFLOP/s and 3.35 TB/s (NVIDIA H100 datasheet)
    assert gpu("h100-sxm").peak("bf16") == pytest.approx(989.4)
    assert gpu("h100-sxm").hbm_TBps == pytest.approx(3.35)
    # A100 312 dense BF16; H800 has H100 compute but 400 GB/s bidirectional NVLink
    assert gpu("a100-80gb").peak("bf16") == 312
    assert gpu("h800").peak("bf16") == gpu("h100-sxm").peak("bf16")
    assert gpu("h800").scale_up.bandwidth_GBps < gpu("h100-sxm").scale_up.bandwidth_GBps
    # A800: A100 80GB compute and memory, NVLink 400 GB/s bidirectional (Reuters, Nov 2022)
    assert gpu("a800").peak("bf16") == gpu("a100-80gb").peak("bf16") and gpu("a800").hbm_GB == 80
    assert gpu("a800").scale_up.bandwidth_GBps == 200
    assert gpu("gb200").scale_up.domain == 72


def test_blackwell_ultra_has_blackwell_training_peaks_and_more_memory():
    # HGX B300 / GB300 NVL72 tables: the FP8 and BF16 training peaks of B200 / GB200, 288 GB HBM3e at 8 TB/s
    for ultra, base in (("b300", "b200"), ("gb300", "gb200")):
        u, b = gpu(ultra), gpu(base)
        assert (u.peak("fp8"), u.peak("bf16")) == (b.peak("fp8"), b.peak("bf16"))
        assert u.hbm_GB == 288 and u.hbm_TBps == pytest.approx(8.0)
        assert u.scale_up == b.scale_up
        assert u.sms is None  # the shipping SM count is not published (160 is the full implementation)
    assert gpu("gb300").peak("fp8") == 5000 and gpu("b300").peak("fp8") == 4500


def test_unknown_figure_is_none_and_asking_for_it_is_an_error():
    g = gpu("ascend-910b")
    assert g.peak_tflops.fp8 is None
    with pytest.raises(SpecError, match="fp8"):
        g.peak("fp8")
    assert set(DTYPES) == set(type(g.peak_tflops).model_fields)


def test_nics_cover_200_400_800():
    speeds = {nic(n).bandwidth_Gbps for n in nic_names()}
    assert {200, 400, 800} <= speeds


def test_unknown_gpu_names_the_field():
    with pytest.raises(SpecError, match="^gpu: expected a catalog name"):
        gpu("h9000")


def test_gb300_memory_reaches_the_planner():
    # the same layout of Llama 3.1 405B: GB200's 186 GB does not hold it, GB300's 288 GB does; same peaks, same speed
    from wanka.cluster.model import Cluster
    from wanka.cluster.spec import parse_cluster_spec
    from wanka.layout import Layout
    from wanka.plan import estimate
    from wanka.workload import load_model

    def rack(part):
        return Cluster(parse_cluster_spec({"name": part, "gpu": part, "gpus": 64, "gpus_per_node": 4,
                                           "scale_up": {"domain": 64},
                                           "scale_out": {"bandwidth_Gbps": 800, "topology": "fat-tree"}}, "test"))

    model, lay = load_model("llama3-405b"), Layout.parse("tp=8,pp=4,gbs=64,zero=1,recompute=none")
    small, big = estimate(model, rack("gb200"), lay), estimate(model, rack("gb300"), lay)
    assert gpu("gb200").hbm_GB < small.memory_GB_per_gpu < gpu("gb300").hbm_GB
    assert not small.fits and big.fits
    assert big.tokens_per_s_per_gpu == pytest.approx(small.tokens_per_s_per_gpu, rel=1e-9)
