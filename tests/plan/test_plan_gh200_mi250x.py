"""GH200 (Alps, JUPITER) and the MI250X (Frontier, LUMI) in the hardware catalog: their figures, how the
planner prices their GEMMs (the MAMF transfer rule), their nodes, and how a published row names them."""

import pytest

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.comm import collective_time, group_for_stride
from wanka.errors import SpecError
from wanka.hardware import gpu
from wanka.layout import Layout
from wanka.plan import efficiency as E
from wanka.plan import estimate
from wanka.plan.row_hardware import row_cluster
from wanka.plan.row_text import catalog_part
from wanka.workload import load_model

H100_RATIO = {"16bit": 0.62 / (794.5 / 989), "fp8": 0.50 / (1402.6 / 1979)}  # in-step over MAMF, H100 SXM


def _cluster(part: str, gpus: int) -> Cluster:
    return Cluster(parse_cluster_spec({"name": part, "gpu": part, "gpus": gpus}, "test"))


@pytest.mark.parametrize("name", ["gh200", "gh200-141gb", "mi250x-gcd"])
def test_every_figure_group_is_sourced(name):
    g = gpu(name)
    assert {"compute", "memory", "power", "scale_up", "node"} <= set(g.sources)
    assert all("@" in text or text.startswith(("as gh200", "not one GPU")) for text in g.sources.values()), name


def test_gh200_is_h100_compute_with_its_own_memory_and_a_four_gpu_mesh():
    h100 = gpu("h100-sxm")
    for name, hbm, tbps in (("gh200", 96, 4.0), ("gh200-141gb", 141, 4.8)):
        g = gpu(name)
        assert g.peak_tflops == h100.peak_tflops
        assert (g.hbm_GB, g.hbm_TBps) == (hbm, tbps)
        assert (g.scale_up.domain, g.scale_up.mesh, g.scale_up.bandwidth_GBps) == (4, True, 450)
        assert (g.node_gpus, g.scale_out_Gbps) == (4, 200)


def test_mi250x_entry_is_one_gcd_half_of_the_oam():
    g = gpu("mi250x-gcd")
    assert g.peak("bf16") == pytest.approx(383 / 2) and g.peak("fp16") == pytest.approx(383 / 2)
    assert (g.hbm_GB, g.hbm_TBps, g.tdp_W) == (64, 1.6, 280)
    assert (g.node_gpus, g.scale_out_Gbps, g.scale_up.domain) == (8, 100, 8)  # 4 x 200 Gb/s per 8 GCDs
    assert g.peak_tflops.fp8 is None and g.peak_tflops.tf32 is None
    with pytest.raises(SpecError, match="fp8"):  # CDNA 2 has no FP8: an FP8 layout is refused, not priced
        estimate(load_model("llama3-8b"), _cluster("mi250x-gcd", 8), Layout.parse("gbs=8,precision=fp8"))


def test_gemm_constants_follow_the_transfer_rule_from_the_mamf_rows():
    # ml-engineering MAMF: GH200 828.6 BF16 / 1535.0 FP8 (900 W module); MI250X 147.0 BF16 on one GCD
    cases = (("gh200-141gb", "16bit", 828.6 / 989.4), ("gh200-141gb", "fp8", 1535.0 / 1978.9),
             ("mi250x-gcd", "16bit", 147.0 / 191.5))
    for part, kind, fraction in cases:
        assert E.GEMM_EFFICIENCY[(part, kind)] == pytest.approx(fraction * H100_RATIO[kind], abs=1e-3)
    gh, gh141, h100 = gpu("gh200"), gpu("gh200-141gb"), gpu("h100-sxm")
    # the 96 GB part takes the 141 GB part's fractions; both are Hopper for everything but their GEMMs
    assert E.gemm_peak_flops(gh, "bf16") == E.gemm_peak_flops(gh141, "bf16") > E.gemm_peak_flops(h100, "bf16")
    assert E.gemm_peak_flops(gh, "fp8") > E.gemm_peak_flops(h100, "fp8")
    assert E.architecture(gh) == "hopper" and E.attention_flops(gh) == E.attention_flops(h100)
    assert E.transferred(gh) and E.transferred(gpu("mi250x-gcd")) and not E.transferred(h100)


def test_a_cluster_spec_takes_the_parts_nodes():
    gh, mi = _cluster("gh200", 4096), _cluster("mi250x-gcd", 3072)
    assert (gh.gpus_per_node, gh.nodes, gh.scale_out.bandwidth_Gbps) == (4, 1024, 200)
    assert (mi.gpus_per_node, mi.nodes, mi.scale_out.bandwidth_Gbps) == (8, 384, 100)


def test_gh200_node_is_a_mesh_so_a_pair_gets_a_third_of_the_links():
    """No NVSwitch in the quad node: a group of g GPUs reaches (g-1)/3 of the 450 GB/s."""
    c = _cluster("gh200", 16)
    t = {g: collective_time(c, "all_gather", 256e6, group_for_stride(c, g, 1)) for g in (2, 4)}
    # all-gather moves (g-1)/g of the buffer; over (g-1)/3 of the links: time ratio (1/2 * 3) / (3/4 * 1)
    assert t[2] / t[4] == pytest.approx((1 / 2 * 3) / (3 / 4), rel=0.05)


def test_the_same_layout_runs_faster_per_gpu_on_gh200_than_h100_and_slower_on_mi250x():
    model, lay = load_model("llama3-8b"), Layout.parse("tp=1,gbs=64,mbs=1,zero=1,recompute=none")
    rate = {part: estimate(model, _cluster(part, 8), lay).tokens_per_s_per_gpu
            for part in ("h100-sxm", "gh200", "mi250x-gcd")}
    assert rate["gh200"] > rate["h100-sxm"] > rate["mi250x-gcd"]


@pytest.mark.parametrize("text, hbm_gb, part", [
    ("NVIDIA GH200", None, "gh200"), ("GH200 Grace Hopper Superchip 96GB", None, "gh200"),
    ("GH200 144GB HBM3e", None, "gh200-141gb"), ("NVIDIA GH200 (HBM3e)", None, "gh200-141gb"),
    ("NVIDIA GH200", 144, "gh200-141gb"), ("AMD Instinct MI250X", None, "mi250x-gcd")])
def test_row_text_names_the_parts(text, hbm_gb, part):
    assumed: list[str] = []
    assert catalog_part(text, hbm_gb, assumed) == part
    if part == "mi250x-gcd":
        assert any("GCD counted as one GPU" in a for a in assumed)
    if text == "NVIDIA GH200" and hbm_gb is None:
        assert "GH200 96 GB HBM3 (memory size not stated)" in assumed


@pytest.mark.parametrize("text", ["AMD MI250", "Tesla V100 32GB", "H100 PCIe"])
def test_parts_still_outside_the_catalog_are_refused_by_name(text):
    with pytest.raises(SpecError, match="not in the catalogue"):
        catalog_part(text)


def test_a_published_row_on_frontier_prices_per_gcd():
    row = {"hardware": {"gpu": "AMD MI250X (Frontier)", "gpu_count": 1024}}
    assumed: list[str] = []
    c = row_cluster(row, assumed)
    assert (c.gpu.name, c.gpus, c.gpus_per_node) == ("mi250x-gcd", 1024, 8)
    assert c.scale_out.bandwidth_Gbps == 100


def test_the_two_gcds_of_one_mi250x_talk_at_the_package_rate():
    """OLCF's Frontier guide: 200 GB/s between the two GCDs of an MI250X, 50-100 between packages. A group of
    GCDs 2k and 2k+1 (a TP-2 group at stride 1) gets the catalog's pair_GBps; the same size at another stride,
    and every larger group, rides the 50 GB/s links."""
    from wanka.comm import group_of_gpus

    c = _cluster("mi250x-gcd", 16)
    assert gpu("mi250x-gcd").scale_up.pair_GBps == 200
    t = {(n, s): collective_time(c, "all_gather", 256e6, group_for_stride(c, n, s)) for n, s in ((2, 1), (2, 2), (4, 1))}
    assert t[(2, 2)] / t[(2, 1)] == pytest.approx(200 / 50, rel=0.05)
    assert t[(4, 1)] > t[(2, 2)]  # more data over the slow links, not the pair rate
    assert group_of_gpus(c, [6, 7]).pair and not group_of_gpus(c, [7, 8]).pair
    # a part without a package pair ignores the flag: H100 pairs and quads share one NVSwitch rate
    h = _cluster("h100-sxm", 16)
    pair, spread = (collective_time(h, "all_gather", 256e6, group_for_stride(h, 2, s)) for s in (1, 2))
    assert pair == pytest.approx(spread)
