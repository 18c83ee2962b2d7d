"""Full layout search for llama3-405b on 16,384 GPUs of meta-24k-h100 (tp, cp, pp, vpp, ep/etp,
mbs, zero, recompute); prints wall and CPU seconds, layouts/s, and the ratio to the goal.

    .venv/bin/python benchmarks/plan_search.py
Goal (issues 3 and 11): <= 1 s cold on one core. "cold" is the first search of a fresh process
(every cache empty); "warm" repeats it with the per-layer compute caches cleared. CPU seconds
(time.process_time) are printed beside wall seconds: on a shared machine wall time includes
waiting for a core, CPU time does not. A MoE search (mixtral-8x7b on 1,024 GPUs, where etp is
searched) is timed the same way.
"""

import time

from wanka.cluster import load_cluster
from wanka.plan import SearchStats, search
from wanka.plan.compute import head_time, layer_time
from wanka.workload import load_model

GOAL_S = 1.0


def timed_search(model, cluster, label: str) -> None:
    stats = SearchStats()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    best = search(model, cluster, top=1, stats=stats)[0]
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(f"{model.name} {label}: layouts evaluated {stats.evaluated}, priced {stats.timed} (fit, not dominated), "
          f"wall {wall:.3f} s, CPU {cpu:.3f} s, layouts/s {stats.evaluated / wall:,.0f} (wall); "
          f"CPU/goal {cpu / GOAL_S:.2f}, wall/goal {wall / GOAL_S:.2f}; best {best.layout} MFU {best.mfu:.3f}")


def main() -> None:
    model = load_model("llama3-405b")
    cluster = load_cluster("meta-24k-h100", gpus=16384)
    timed_search(model, cluster, "cold")
    layer_time.cache_clear()
    head_time.cache_clear()
    timed_search(model, cluster, "warm")
    timed_search(load_model("mixtral-8x7b"), load_cluster("meta-24k-h100", gpus=1024), "cold")
    print(f"goal: 405B on 16,384 GPUs <= {GOAL_S} s cold")


if __name__ == "__main__":
    main()
