"""DeepEP / HybridEP dispatch and combine inside one NVLink domain, at their published rates
(docs/plan.md "MoE, hierarchical dispatch").

When a flex-dispatcher EP group (--moe-token-dispatcher-type flex, backend deepep or hybridep) spans
nodes, wanka.plan.hier_dispatch prices DeepEP's two-leg path. Inside one scale-up domain the kernels
copy each token once to every *rank* holding one of its experts (not once per expert), straight over
NVLink, and run on a fixed number of SMs -- so neither the flat all-to-all's bytes (top_k copies per
token) nor its link rate describe them. Their own benchmark does:

  deepseek-ai/DeepEP, branch hybrid-ep @94a9f8f6, docs/README_Hybrid-EP.md, "Performance Results"
  (4,096 tokens per rank, hidden 7,168, top-8, 8 local experts, random uniform routing): algorithm
  bandwidth through the torch API of HybridEP on GB200 at 8/16/24/32/36 ranks with 16 or 32 SMs and
  on B200 at 8 ranks with 16 SMs, and of DeepEP's normal kernels on GB200 at 8/16/24 ranks with 16/24/32
  SMs and on B200 at 8 ranks with 16-48 SMs; dispatch in BF16 and FP8, combine in BF16.
  tests/test_hybrid_ep.py on that branch counts the bytes: dispatch = a rank's received tokens
  (`dispatched_hidden.numel() * 2`, one copy per source token and destination rank) in BF16, times
  (1 + 4/128) / 2 in FP8 (1-byte values and one fp32 scale per 128), and the combine sends the same
  tokens back in BF16.

Priced here: one MoE layer forward's dispatch + combine = R x h x b_d / B_d + R x h x 2 / B_c, with R
the rank's received copies (tokens x expected distinct destination ranks per token, the routing
closed form of hier_dispatch.expected_distinct_units, x the most-loaded rank's imbalance) and B_d, B_c
the table's rates for the GPU, backend, rank count and SM count. Assumptions, stated: rates are
interpolated linearly in ranks and in SMs between measured points and held at the nearest measured
point outside them (GB200 HybridEP beyond 36 ranks takes 36's; DeepEP beyond 24, 24's); the figures
for the benchmark's shape (hidden 7,168, 4,096 tokens) stand for every shape; a part without figures
(Hopper inside a node, B300/GB300, non-NVIDIA) has these bytes priced at the flat all-to-all's rate
(hier_dispatch.flex_ep_layer_comm_s).
"""

from __future__ import annotations

import bisect

# (backend, part) -> {ranks: {sms: (dispatch BF16 GB/s, dispatch FP8 GB/s, combine GB/s)}}, torch API
# figures of README_Hybrid-EP.md @94a9f8f6 (module docstring)
RATES_GBPS: dict[tuple[str, str], dict[int, dict[int, tuple[float, float, float]]]] = {
    ("hybridep", "gb200"): {
        8: {16: (550.10, 421.67, 538.44), 32: (545.71, 455.35, 568.94)},
        16: {16: (472.84, 397.33, 474.48), 32: (523.48, 444.67, 521.55)},
        24: {16: (441.89, 281.73, 444.40), 32: (507.32, 403.20, 483.76)},
        32: {16: (485.50, 236.33, 423.19), 32: (484.22, 392.70, 464.54)},
        36: {16: (469.96, 215.36, 418.27), 32: (479.02, 361.13, 447.89)},
    },
    ("hybridep", "b200"): {8: {16: (535.94, 409.71, 530.86)}},
    ("deepep", "gb200"): {
        8: {16: (362.01, 248.86, 310.21), 24: (512.72, 350.97, 425.95), 32: (615.78, 447.76, 519.57)},
        16: {16: (328.80, 242.51, 278.34), 24: (442.47, 338.87, 378.32), 32: (520.76, 393.72, 442.51)},
        24: {16: (324.64, 258.33, 126.53), 24: (450.22, 351.05, 163.62), 32: (502.84, 405.04, 207.10)},
    },
    ("deepep", "b200"): {8: {16: (348, 246, 302), 24: (494, 349, 420), 28: (560, 397, 477), 32: (619, 443, 524),
                             36: (635, 482, 549), 40: (629, 519, 570), 44: (640, 544, 577), 48: (646, 554, 586)}},
}
FP8_BYTES_PER_ELEMENT = 1 + 4 / 128  # FP8 values and one fp32 scale per 128 (the benchmark's fp8_factor x 2)


def _interp(points: dict[int, tuple[float, ...]], x: float) -> tuple[float, ...]:
    """Linear in x between the measured keys, held at the nearest one outside them."""
    keys = sorted(points)
    if x <= keys[0]:
        return points[keys[0]]
    if x >= keys[-1]:
        return points[keys[-1]]
    i = bisect.bisect_right(keys, x) - 1
    lo, hi = keys[i], keys[i + 1]
    w = (x - lo) / (hi - lo)
    return tuple(a + (b - a) * w for a, b in zip(points[lo], points[hi]))


def flex_rates_GBps(backend: str, part: str, ranks: int, sms: int) -> tuple[float, float, float] | None:
    """(dispatch BF16, dispatch FP8, combine) GB/s of `backend` on `part` for an EP group of `ranks`
    inside one NVLink domain with `sms` SMs for the kernels; None without published figures."""
    table = RATES_GBPS.get((backend, part))
    if table is None:
        return None
    by_ranks = {r: _interp(by_sms, sms) for r, by_sms in table.items()}
    return _interp(by_ranks, ranks)  # type: ignore[return-value]


def intra_domain_flex_comm_s(part: str, backend: str, ranks: int, sms: int, tokens: float, hidden: int,
                             elem: float, distinct_ranks: float, imbalance: float) -> float | None:
    """Dispatch + combine of one MoE layer forward (the backward moves the same) through DeepEP's or
    HybridEP's NVLink kernels, or None where their rates are not published for `part`. `tokens`: the
    tokens one EP rank dispatches per micro-batch; `elem`: bytes per dispatched element (2 BF16, 1 FP8);
    `distinct_ranks`: expected destination ranks per token; `imbalance`: the most-loaded rank's factor."""
    rates = flex_rates_GBps(backend, part, ranks, sms)
    if rates is None or ranks <= 1:
        return None
    disp_bf16, disp_fp8, combine = rates
    dispatch_b, combine_b = flex_bytes(tokens, hidden, elem, distinct_ranks, imbalance)
    return dispatch_b / ((disp_fp8 if elem < 2 else disp_bf16) * 1e9) + combine_b / (combine * 1e9)


def flex_bytes(tokens: float, hidden: int, elem: float, distinct_ranks: float,
               imbalance: float) -> tuple[float, float]:
    """(dispatch, combine) bytes one EP rank receives (and sends back) through DeepEP's / HybridEP's kernels:
    one copy per token and destination rank; the dispatch in BF16, or FP8 with its scales (elem < 2), the
    combine in BF16 (tests/test_hybrid_ep.py's count, module docstring)."""
    copies = tokens * distinct_ranks * imbalance * hidden  # elements a rank receives (and sends back)
    return copies * (FP8_BYTES_PER_ELEMENT if elem < 2 else 2.0), copies * 2.0
