"""Hot-spare pool sizing as ByteRobust does it (SOSP'25 section 6.2) [P].

"We estimate the daily failure rate of individual machines using historical data and model
simultaneous failures across machines by a binomial distribution. We set the number of warm standby
instances to the 99th percentile (P99) of this distribution." Here the per-machine probability comes
from a FailureModel (node-swap causes only: restarts need no spare) over the window in which a
failed node is away (its repair time; ByteRobust's window is one day).
"""

from __future__ import annotations

import math

from wanka.reliability.failures import FailureModel


def binomial_quantile(n: int, p: float, q: float) -> int:
    """Smallest k with P[Binomial(n, p) <= k] >= q (log-space pmf, no scipy)."""
    if p <= 0:
        return 0
    if p >= 1:
        return n
    cdf, logq1 = 0.0, math.log1p(-p)
    for k in range(n + 1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * logq1
        cdf += math.exp(log_pmf)
        if cdf >= q:
            return k
    return n


def p99_spares(model: FailureModel, gpus: int, gpus_per_node: int, window_h: float = 24.0, q: float = 0.99) -> int:
    """Spare nodes covering the node failures of `window_h` hours with probability q."""
    nodes = gpus // gpus_per_node
    # single-node failures only: ByteRobust fixes catastrophic cases (32 machines, e.g. a ToR switch)
    # at 1% probability instead of sizing the pool for them (section 6.2) [P]
    node_rate_h = sum(r for r, c in zip(model.rates_per_hour(gpus_per_node, gpus_per_node), model.causes)
                      if c.recovery == "node_swap" and c.blast == "node")
    p = -math.expm1(-node_rate_h * window_h)  # P[a given node fails within the window]
    return binomial_quantile(nodes, p, q)
