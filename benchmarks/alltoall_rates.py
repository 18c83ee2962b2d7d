"""The planner's EP all-to-all rate against DeepEP's published bottleneck bandwidths.

    python benchmarks/alltoall_rates.py [--cluster meta-24k-h100] [--tokens 4096]

One DeepSeek-V3 dispatch per rank (tokens x top-8 x hidden 7168, FP8 = 1 byte), EP ranks packed 8
per node. Prints, per EP size, the bytes leaving the node divided by the modelled exchange time
(DeepEP's "bottleneck bandwidth" for RDMA) next to DeepEP's measured figures (deepseek-ai/DeepEP
docs/legacy.md, collectives.md s.3: H800 + CX7 400G, normal kernels 43/58/51 GB/s at EP16/32/64;
low-latency kernels ~39-40 GB/s at EP128-256). DeepEP dedups tokens across nodes and forwards over
NVLink, NCCL's plain all-to-all (what the planner prices) does not: the ratio says how close plain
NCCL is modelled to DeepEP, not a pass/fail.
"""

from __future__ import annotations

import argparse

from wanka.cluster import load_cluster
from wanka.comm import collective_time, group_for_stride

DEEPEP_GBPS = {16: 43.0, 32: 58.0, 64: 51.0, 128: 39.5, 256: 39.5}  # 128/256: low-latency kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="meta-24k-h100")
    ap.add_argument("--tokens", type=int, default=4096)
    args = ap.parse_args()
    cluster = load_cluster(args.cluster)
    per_node = cluster.levels[0].span_gpus
    nbytes = args.tokens * 8 * 7168 * 1
    print(f"{args.cluster}: {nbytes / 2**20:.0f} MiB per rank; EP, modelled GB/s leaving the node, DeepEP GB/s, ratio")
    for ep in (16, 32, 64, 128, 256):
        t = collective_time(cluster, "all_to_all", nbytes, group_for_stride(cluster, ep, 1))
        remote = nbytes * (ep - per_node) / ep
        rate = remote / t / 1e9
        print(f"  EP{ep:<4} {rate:6.1f}  {DEEPEP_GBPS[ep]:5.1f}  {rate / DEEPEP_GBPS[ep]:.2f}")


if __name__ == "__main__":
    main()
