"""A cluster spec that states no gpus_per_node or scale-out bandwidth takes its GPU's platform from the
catalog (node_gpus, scale_out_Gbps), as scale_up.domain does; stated values and named NICs win."""

import pytest

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec, platform
from wanka.errors import SpecError
from wanka.hardware.catalog import gpu


def _cluster(**spec) -> Cluster:
    return Cluster(parse_cluster_spec({"name": "t", **spec}))


@pytest.mark.parametrize("part, node, Gbps", [("gb200", 4, 400), ("gb300", 4, 800), ("b300", 8, 800),
                                              ("a100-80gb", 8, 200), ("h100-sxm", 8, 400)])
def test_unstated_node_and_nic_come_from_the_gpu_platform(part, node, Gbps):
    c = _cluster(gpu=part, gpus=144)
    assert (c.gpus_per_node, c.scale_out.bandwidth_Gbps) == (node, Gbps)
    assert c.nodes == 144 // node
    assert (gpu(part).node_gpus, gpu(part).scale_out_Gbps) == (node, Gbps)


def test_a_gb200_rack_of_whole_trays_no_longer_needs_gpus_per_node():
    # 36 GPUs = 9 compute trays of 4; with the old fixed default of 8 GPUs per node this was refused
    c = _cluster(gpu="gb200", gpus=36)
    assert (c.nodes, c.domain) == (9, 72)
    with pytest.raises(SpecError, match="gpus_per_node"):
        _cluster(gpu="gb200", gpus=36, gpus_per_node=8)


def test_stated_values_and_named_nics_win():
    c = _cluster(gpu="gb200", gpus=144, gpus_per_node=8, scale_out={"bandwidth_Gbps": 100})
    assert (c.gpus_per_node, c.scale_out.bandwidth_Gbps) == (8, 100)
    c = _cluster(gpu="a100-80gb", gpus=64, scale_out={"nic": "cx7-ndr-400g"})
    assert c.scale_out.bandwidth_Gbps == 400  # the named NIC, not the A100 platform's 200


def test_parts_without_a_platform_keep_the_documented_defaults():
    assert platform("h800") == (None, None) and platform("no-such-gpu") == (None, None)
    c = _cluster(gpu="h800", gpus=64)
    assert (c.gpus_per_node, c.scale_out.bandwidth_Gbps) == (8, 400)
    with pytest.raises(SpecError, match="gpu"):  # an unknown name is still refused, on `gpu`
        _cluster(gpu="no-such-gpu", gpus=64)


def test_an_inline_gpu_states_its_own_platform():
    inline = {"name": "x1", "peak_tflops": {"bf16": 100}, "hbm_GB": 64, "scale_up": {"bandwidth_GBps": 100, "domain": 4},
              "node_gpus": 4, "scale_out_Gbps": 100}
    c = _cluster(gpu=inline, gpus=16)
    assert (c.gpus_per_node, c.scale_out.bandwidth_Gbps) == (4, 100)
    with pytest.raises(SpecError, match="node_gpus"):
        _cluster(gpu={**inline, "node_gpus": 0}, gpus=16)
