"""All-to-all across nodes against SimAI's measured efficiency table (aliyun/SimAI
inputs/ratio/ata_ratio.csv): achieved busbw over the bandwidth bound, by per-rank size and nodes."""

import pytest

from wanka.cluster import load_cluster
from wanka.comm import bus_bandwidth_GBps, collective_time, group_for_stride
from wanka.comm.alltoall_efficiency import alltoall_size_efficiency

MIB = 1 << 20


@pytest.fixture(scope="module")
def meta():
    return load_cluster("meta-24k-h100")  # 8 GPUs per node, 50 GB/s NIC per GPU


def _bandwidth_time(cluster, size, nbytes):
    """The exchange's time less its fixed latency (the time of a 1-byte exchange)."""
    g = group_for_stride(cluster, size, 1)
    return collective_time(cluster, "all_to_all", nbytes, g) - collective_time(cluster, "all_to_all", 1, g)


def test_64_ranks_on_8_nodes_fall_off_as_measured(meta):
    # the table's 8-node column: 0.64 at 16 MiB, 0.87 at 256 MiB, 0.94 at 16 GiB per rank
    def rate(nbytes):
        return nbytes / _bandwidth_time(meta, 64, nbytes)

    big = rate(16 << 30)
    assert rate(256 * MIB) / big == pytest.approx(0.87 / 0.94, rel=1e-6)
    assert rate(16 * MIB) / big == pytest.approx(0.64 / 0.94, rel=1e-6)
    # and the large-message rate is the NICs' bound: 7/8 of the bytes leave through a 50 GB/s NIC at 0.92
    assert bus_bandwidth_GBps("all_to_all", 16 << 30, 64, _bandwidth_time(meta, 64, 16 << 30)) == pytest.approx(
        50 * 0.92 * 63 / 56, rel=1e-6)


def test_more_nodes_reach_less_of_the_bound_at_the_same_size():
    assert alltoall_size_efficiency(256 * MIB, 16) == pytest.approx(0.75 / 0.90)
    assert alltoall_size_efficiency(256 * MIB, 16) < alltoall_size_efficiency(256 * MIB, 8) < alltoall_size_efficiency(
        256 * MIB, 4)


def test_sizes_interpolate_and_clamp():
    mid = alltoall_size_efficiency(192 * MIB, 8)  # halfway between 128 MiB (0.85) and 256 MiB (0.87)
    assert mid == pytest.approx(0.86 / 0.94)
    assert alltoall_size_efficiency(1, 8) == alltoall_size_efficiency(16 * MIB, 8) == pytest.approx(0.64 / 0.94)
    assert alltoall_size_efficiency(64 << 30, 8) == 1.0
    assert all(0 < alltoall_size_efficiency(s * MIB, n) <= 1 for s in (1, 100, 5000) for n in (1, 2, 3, 16, 500))


def test_node_counts_between_columns_take_the_one_below():
    assert alltoall_size_efficiency(64 * MIB, 3) == alltoall_size_efficiency(64 * MIB, 2)
    assert alltoall_size_efficiency(64 * MIB, 12) == alltoall_size_efficiency(64 * MIB, 8)
    assert alltoall_size_efficiency(64 * MIB, 128) == alltoall_size_efficiency(64 * MIB, 16)
    assert alltoall_size_efficiency(64 * MIB, 1) == pytest.approx(0.60 / 0.78)  # NVLink column
