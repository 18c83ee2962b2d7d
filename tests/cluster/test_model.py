import pytest

from wanka.cluster import cluster_names, load_cluster

PRESETS = ["wanka-10k", "meta-24k-h100", "bytedance-12k", "google-a3-26k", "meta-rsc-16k-a100", "xai-100k",
           "telecom-15k", "mthreads-kuae-10k", "ascend-16k", "tencent-hcc-100k", "baidu-supernode-2campus",
           "alibaba-lingjun"]


def test_all_named_presets_exist():
    assert set(PRESETS) <= set(cluster_names())


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_with_a_consistent_hierarchy(name):
    c = load_cluster(name)
    assert c.nodes * c.gpus_per_node == c.gpus
    spans = [lv.span_gpus for lv in c.levels]
    assert spans == sorted(set(spans)), "spans strictly grow"
    assert spans[-1] == c.gpus and spans[0] == c.domain
    assert all(lv.bandwidth_GBps > 0 and lv.latency_us > 0 for lv in c.levels)
    assert c.switches > 0 and c.bisection_TBps > 0
    assert c.spec.notes, "presets document which fields are assumptions"
    groups = c.node_groups()
    assert all(len(ids) == c.nodes for ids in groups.values())


def test_default_cluster_figures():
    c = load_cluster()
    assert (c.name, c.gpus, c.nodes, c.gpu.name) == ("wanka-10k", 10240, 1280, "h800")
    # 10,240 x 989.4 dense BF16 TFLOP/s
    assert c.peak_pflops()["bf16"] == pytest.approx(10240 * 989.4 / 1000)
    # non-blocking: bisection = half the GPUs x 50 GB/s
    assert c.bisection_TBps == pytest.approx(10240 / 2 * 50 / 1000)
    # k=64, d=32: 320 leaves, 320 aggregation, 160 core switches
    assert c.switches == 800
    p = c.power_MW()
    assert p["gpu"] == pytest.approx(10240 * 700 / 1e6)
    assert p["facility"] == pytest.approx(p["it"] * 1.25)


def test_bisection_follows_oversubscription():
    base = load_cluster("wanka-10k")
    for o in (2.0, 4.0):
        spec = base.spec.model_dump()
        spec["scale_out"]["oversubscription"] = o
        c = load_cluster("wanka-10k", scale_out=spec["scale_out"])
        assert c.bisection_TBps == pytest.approx(base.bisection_TBps / o)
        assert c.levels[-1].bandwidth_GBps == pytest.approx(base.nic_GBps / o)


def test_meta_pods_and_core_oversubscription():
    c = load_cluster("meta-24k-h100")
    names = [lv.name for lv in c.levels]
    assert names == ["scale-up", "leaf", "spine", "core"]
    assert c.levels[1].span_gpus == 16 and c.levels[2].span_gpus == 3072
    assert c.levels[3].bandwidth_GBps == pytest.approx(50 / 7)  # Llama 3: 1:7 above the pods


def test_telecom_peak_matches_seed_claim():
    assert load_cluster("telecom-15k").peak_pflops()["fp16"] > 4500  # seed 003: over 4,500 PFLOPS


def test_two_campus_level_and_supernode():
    c = load_cluster("baidu-supernode-2campus")
    assert c.domain == 64 and c.campuses == 2
    campus = c.levels[-1]
    assert campus.name == "campus" and campus.latency_us > 500  # 0.5 ms long-haul link
    assert campus.bandwidth_GBps == pytest.approx(200e3 / 8 / 8192)
    assert c.bisection_TBps == pytest.approx(200 / 8)


def test_lingjun_real_topology():
    c = load_cluster("alibaba-lingjun")
    g = c.node_groups()
    assert c.nodes == 847
    assert len(set(g["leaf"])) == 119 and len(set(g["spine"])) == 3 and len(set(g["core"])) == 1
    assert c.switches == 119 + 3 + 1
    # hosts under one ToR are contiguous node ids
    leaf = g["leaf"]
    assert all(leaf[i] <= leaf[i + 1] for i in range(len(leaf) - 1))


def test_overrides_make_smaller_clusters():
    c = load_cluster("meta-24k-h100", gpus=16384)
    assert c.gpus == 16384 and c.levels[-1].span_gpus == 16384


def test_nvl72_domains_nest_inside_leaves_and_pods():
    spec = {"name": "nvl72", "gpu": "gb200", "gpus": 9216, "gpus_per_node": 4, "scale_up": {"domain": 72},
            "scale_out": {"bandwidth_Gbps": 800, "topology": "rail-fat-tree", "switch_radix": 64}}
    from wanka.cluster.model import Cluster
    from wanka.cluster.spec import parse_cluster_spec

    c = Cluster(parse_cluster_spec(spec))
    spans = [lv.span_gpus for lv in c.levels]
    assert spans[0] == 72
    assert all(outer % inner == 0 for inner, outer in zip(spans, spans[1:])), spans
    groups = c.node_groups()
    # every 18-tray NVL72 rack sits under exactly one leaf
    for rack in range(c.nodes // 18):
        assert len(set(groups["leaf"][rack * 18:(rack + 1) * 18])) == 1
