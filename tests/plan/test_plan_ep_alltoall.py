"""The expert-parallel all-to-all of published MoE runs: where the EP group's peers sit and what the
exchange costs at the measured NCCL all-to-all rate (aliyun/SimAI ata_ratio.csv, wanka.comm.alltoall_efficiency)."""

import pytest

from wanka.comm import group_for_stride
from wanka.plan.exposure import ep_layer_comm_s
from wanka.plan.published import framework_options, load_rows, row_cluster, row_layout, row_model

MIB = 1 << 20


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in load_rows("dgxc")}


def test_deepseek_v3_h100_ep64_crosses_eight_nodes_at_the_measured_rate(rows):
    row = rows["dgxc_deepseek-v3-671b_h100_512gpu_bf16_25.04"]
    cluster, (lay, _) = row_cluster(row), row_layout(row)
    lay = lay.resolve(cluster.gpus, row_model(row))
    size, stride = lay.group("ep")
    g = group_for_stride(cluster, size, stride)
    assert (size, g.units_used()[0], g.fanout[0]) == (64, 8, 8)  # 8 nodes; 7 of 63 peers over NVLink
    # one micro-batch's dispatch: 4096 tokens x top-8 x hidden 7168 x 2 B, split over tp 2 (sequence parallel)
    nbytes = 4096 * 8 * 7168 * 2 / 2  # 224 MiB per rank
    opts = framework_options(row, lay)
    t = ep_layer_comm_s(cluster, lay, nbytes, opts) / 2  # dispatch + combine -> one exchange
    # SimAI's 8-node column between 128 MiB (0.85) and 256 MiB (0.87), of 0.94 at 16 GiB
    eff = (0.85 + (0.87 - 0.85) * (224 - 128) / 128) / 0.94
    bound = nbytes * 56 / 64 / (50e9 * 0.92)  # 7/8 of the bytes through a 400G NIC at 0.92
    assert bound / eff < t < bound / eff + 200e-6  # plus the exchange's fixed latency


def test_deepseek_v3_gb200_ep64_stays_in_one_nvlink_domain(rows):
    """NeMo@7a8f1cc7 scripts/performance/utils.py slurm_executor asks for `--segment 16` trays (64 GPUs)
    on GB200 jobs beyond one rack: each pipeline stage's 64 expert ranks share one NVL72 rack."""
    row = rows["dgxc_deepseek-v3-671b_gb200_256gpu_bf16_25.04"]
    cluster, (lay, _) = row_cluster(row), row_layout(row)
    assert cluster.levels[0].span_gpus == 64
    lay = lay.resolve(cluster.gpus, row_model(row))
    size, stride = lay.group("ep")
    assert group_for_stride(cluster, size, stride).units_used()[0] == 1
