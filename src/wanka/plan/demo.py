"""`make demo` section: plan a 405B-class model on the default 10k-GPU cluster."""

from __future__ import annotations

import time

from wanka.cluster import DEFAULT_CLUSTER, load_cluster
from wanka.plan.cli import short_layout
from wanka.plan.search import SearchStats, search
from wanka.plan.whole_run import whole_run
from wanka.workload import load_model


def run() -> None:
    model, cluster = load_model("llama3-405b"), load_cluster(DEFAULT_CLUSTER)
    stats = SearchStats()
    t0 = time.perf_counter()
    top = search(model, cluster, top=3, stats=stats)
    print(f"plan: {model.name} on {cluster.name} ({cluster.gpus:,} x {cluster.gpu.name}), "
          f"{stats.evaluated:,} layouts in {time.perf_counter() - t0:.1f} s, {stats.timed:,} fit in memory")
    for e in top:
        print(f"  {short_layout(e.layout):60s} MFU {e.mfu:.1%}  {e.tokens_per_s_per_gpu:6.1f} tok/s/GPU  "
              f"{e.memory_GB_per_gpu:5.1f} GiB")
    run15 = whole_run(top[0], 15e12, cluster)
    print(f"  15T tokens: {run15['days']:.0f} days, {run15['gpu_hours'] / 1e6:.1f} M GPU-hours, "
          f"{run15['energy_MWh']:,.0f} MWh (PUE {cluster.spec.power.pue}), ${run15['cost_usd'] / 1e6:.1f} M electricity")
