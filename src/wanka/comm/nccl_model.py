"""Constants of NCCL's own cost model and the link efficiencies we apply on top of it.

Latency constants: NVIDIA/nccl src/graph/tuning.cc (NCCL 2.30.7, as transcribed in
shared/reference/sched_network.md section 3.3), in microseconds, per protocol LL / LL128 / Simple:

    baseLat          Tree 6.8 / 14.0 / 8.4     Ring 6.6 / 14.0 / 8.4
    hwLat NVLink     Tree 0.6 / 1.25 / 4.0     Ring 0.6 / 1.9 / 3.4
    hwLat NET        Tree 5.0 / 8.5 / 14       Ring 2.7 / 4.0 / 14.0

NCCL's hwLat is the whole per-step cost (hardware + protocol software) of one hop on a reference
system: an NVLink hop, or a network hop through one switch. Our cluster levels carry their own
one-way hardware latency (cluster.Level.latency_us, no software); a level above the leaf adds its
extra hardware latency (more switch hops, a campus link) over the first network level.

Protocol bandwidth factors (tuning.cc): LL moves 8 bytes of which 4 are data -> 0.5 of busBw;
LL128 moves 120 of 128 bytes -> 0.92 (the factor NCCL applies); Simple -> 1.0.

Link efficiencies (large messages, fraction of the per-GPU per-direction line rate that nccl-tests
busbw reaches), collectives.md sections 1-2 and 6:
  * network 0.92: 46-48 GB/s per 400 Gb/s NIC (nccl-tests#290), ~24 GB/s per 200 Gb/s NIC
    (nccl-tests#252), 192 of 200 GB/s on DGX-A100 (nccl#812).
  * scale-up ring 0.80: 8x H100 NVLS all-reduce reaches ~480 GB/s busbw on 450 GB/s links; ring
    without NVLS about 0.8x of that line rate (collectives.md section 6); 8x A100 ~240 of 300 GB/s
    (nccl#1712).
"""

from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LAT_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 8.4)}
HW_LAT_SCALE_UP_US = {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 4.0)}
HW_LAT_NET_US = {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 14.0)}
PROTOCOL_BW = (0.5, 0.92, 1.0)

LINK_EFFICIENCY_SCALE_UP = 0.80
LINK_EFFICIENCY_NET = 0.92

# NCCL's default scale-up hop latency the constants above were measured with (~1 us one way,
# cluster/spec.py default) and the first network level's (2 NICs + 1 switch hop = 2.5 us).
REF_SCALE_UP_LAT_US = 1.0
REF_NET_LAT_US = 2.5

# Multi-node refinements of NCCL's model (NVIDIA/nccl@5067397 src/graph/tuning.cc ncclTopoTuneModel),
# applied when a group spans more than one scale-up domain (NCCL's nNodes > 1):
#   * LL's bus bandwidth is capped: Ring "busBw = min(llMaxBw, busBw * .5)", Tree "min(busBw / 3.8,
#     llMaxBw)"; for nNodes > 1 llMaxBw is chosen by the host CPU (llMaxBws rows Intel / AMD, columns
#     2 nodes / more): Intel 39.0 / 20.4 GB/s, AMD 22.5 / 19.0 GB/s.
#   * every intra-node ring step costs at least the network post overhead ("Inter-node rings still
#     have to launch nsteps * net overhead"): intraLat = max(hwLat, getNetOverhead()), 1 us on Intel
#     (and other) hosts, 2 us on AMD, x3 for Simple.
# The cluster spec does not name the host CPU: the Intel / other-vendor values are taken (assumption;
# DGX H100 hosts are Intel Xeon; DGX A100 hosts are AMD EPYC, whose 22.5 / 19.0 GB/s and 2 us differ).
LL_MAX_BW_MULTI_NODE_GBPS = (39.0, 20.4)  # (2 nodes, 3 or more): llMaxBws Intel row
NET_OVERHEAD_US = 1.0  # getNetOverhead(), Intel / other CPUs
NET_OVERHEAD_SIMPLE_FACTOR = 3.0  # "if (p == NCCL_PROTO_SIMPLE) netOverhead *= 3"

# All-to-all: NCCL implements it as n-1 concurrent send/recv pairs; we charge the Simple base
# latency, two network hops and a per-peer issue cost. 0.5 us per peer reproduces DeepEP's
# low-latency dispatch growing from 77 us (EP8) to ~194 us (EP256) (collectives.md section 3)
# within ~20% -- an assumption fitted to that one series, stated in docs/comm.md.
A2A_PER_PEER_US = 0.5
