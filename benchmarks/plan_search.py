"""Full layout search for llama3-405b on 16,384 GPUs of meta-24k-h100; prints layouts/s.

    .venv/bin/python benchmarks/plan_search.py
Goal (issue 3): <= 1 s on one core. Run twice in one process: cold (empty caches) and warm.
"""

import time

from wanka.cluster import load_cluster
from wanka.plan import SearchStats, search
from wanka.plan.compute import head_time, layer_time
from wanka.workload import load_model


def main() -> None:
    model = load_model("llama3-405b")
    cluster = load_cluster("meta-24k-h100", gpus=16384)
    for label in ("cold", "warm"):
        if label == "cold":
            layer_time.cache_clear()
            head_time.cache_clear()
        stats = SearchStats()
        t0 = time.perf_counter()
        best = search(model, cluster, top=1, stats=stats)[0]
        seconds = time.perf_counter() - t0
        print(f"{label}: layouts evaluated {stats.evaluated}, priced {stats.timed} (fit, not dominated), seconds {seconds:.3f}, "
              f"layouts/s {stats.evaluated / seconds:,.0f}; best {best.layout} MFU {best.mfu:.3f}")
    print(f"global batch {stats.gbs} sequences ({stats.gbs_rule}); not priced: {dict(stats.dropped)}")


if __name__ == "__main__":
    main()
