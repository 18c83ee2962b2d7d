"""How far a measured NCCL all-to-all falls below its bandwidth bound, by size and node count.

Source: aliyun/SimAI (Wang et al., NSDI'25) `inputs/ratio/ata_ratio.csv` -- measured nccl-tests-style
all-to-all efficiency (achieved busbw over SimAI's analytical bound) per per-rank size ("size" as
nccl-tests counts it: what one rank sends in all) for one 8-GPU node over NVLink and for 2, 4, 8 and
16 nodes over the NICs (16-128 ranks). SimAI (`astra-sim/system/calbusbw.cc` `getValue`/`cal_ratio`)
divides the interpolated entry by the column's largest-size entry (16 GiB), so the table gives the
*shape* of the fall-off below large messages on top of the large-message link efficiency; we apply it
the same way, on the bandwidth term only (wanka.comm.collectives._all_to_all_time_s).

Its analytical bound is the one our model prices (calbusbw.cc: busBw = nic_bw * nics / g * (n-1) /
((N-1) g), i.e. the bytes leaving the node at the NICs' rate). At 8 nodes / 64 ranks the measured
fraction is 0.64 of the 16 GiB figure's 0.94 at 16 MiB per rank and 0.87 at 256 MiB: incast onto each
NIC from 56 remote peers at once. At 16 nodes it is 0.62-0.75 at 16-256 MiB (0.90 at 16 GiB).

Choices of ours, stated (docs/comm.md): node counts between the measured columns take the column at
or below (3 nodes -> the 2-node column); more than 16 nodes take the 16-node column (SimAI's 32-128
node columns are empty; its reader fills them with 1, i.e. no fall-off, which we do not copy); a
group inside one scale-up domain takes the NVLink column whatever the domain's size (measured on
8-GPU nodes; an NVL72 domain's all-to-all has no published curve here); sizes below 16 MiB take
the 16 MiB entry (as SimAI does), above 16 GiB the 16 GiB one.
"""

from __future__ import annotations

import bisect

MIB = 1 << 20
# per-rank size (bytes) -> measured ratio; columns: NVLink (1 node), then 2, 4, 8, 16 nodes over NICs
_SIZES = tuple(16 * MIB << k for k in range(11))  # 16 MiB .. 16 GiB
_COLUMNS: dict[int, tuple[float, ...]] = {
    1: (0.44, 0.51, 0.60, 0.65, 0.70, 0.71, 0.74, 0.76, 0.77, 0.78, 0.78),
    2: (0.52, 0.63, 0.72, 0.76, 0.79, 0.80, 0.81, 0.81, 0.80, 0.80, 0.80),
    4: (0.67, 0.68, 0.83, 0.90, 0.92, 0.94, 0.94, 0.95, 0.95, 0.95, 0.95),
    8: (0.64, 0.67, 0.82, 0.85, 0.87, 0.89, 0.92, 0.93, 0.94, 0.94, 0.94),
    16: (0.62, 0.66, 0.66, 0.72, 0.75, 0.81, 0.85, 0.88, 0.89, 0.90, 0.90),
}


def _column(units: int) -> tuple[float, ...]:
    """The measured column for a group spanning `units` scale-up domains (nodes)."""
    if units <= 1:
        return _COLUMNS[1]
    return _COLUMNS[max(k for k in _COLUMNS if 1 < k <= max(2, units))]


def alltoall_size_efficiency(nbytes: float, units: int) -> float:
    """Fraction (0, 1] of the large-message all-to-all bandwidth reached at `nbytes` per rank when
    the group spans `units` scale-up domains (1 = all peers over NVLink)."""
    col = _column(units)
    top = col[-1]
    if nbytes <= _SIZES[0]:
        return col[0] / top
    if nbytes >= _SIZES[-1]:
        return 1.0
    i = bisect.bisect_right(_SIZES, nbytes) - 1
    s0, s1 = _SIZES[i], _SIZES[i + 1]
    v = col[i] + (col[i + 1] - col[i]) * (nbytes - s0) / (s1 - s0)  # linear in bytes, as SimAI
    return min(1.0, v / top)
