"""`make demo` section for the scheduler: the first 4,000 Philly jobs on a 512-GPU slice of wanka-10k,
first-fit against topology-aware best-fit (a few seconds)."""

from __future__ import annotations

from wanka.cluster import load_cluster
from wanka.sched.runs import load_workload, run_policy
from wanka.sched.trace import PHILLY


def run() -> None:
    print("== sched: topology-aware gang scheduling, replayed on the Microsoft Philly trace ==")
    if not PHILLY.is_file():
        print(f"(skipped: the Philly trace is not at {PHILLY})")
        return
    cluster = load_cluster("wanka-10k", gpus=512)
    work = load_workload("philly", cluster, limit=4000)
    print(f"{len(work.jobs):,} real jobs (1-128 GPUs) on {cluster.gpus} GPUs of {cluster.name} "
          f"({cluster.nodes} nodes of {cluster.gpus_per_node}); FIFO + EASY backfill")
    print(f"{'placement':<14}{'mean JCT h':>12}{'p95 JCT h':>11}{'mean wait h':>13}{'util':>7}"
          f"{'eff util':>10}{'gangs at min spread':>21}")
    for policy in ("first-fit", "topo-bestfit"):
        r = run_policy(cluster, work, f"{policy}/fifo")
        print(f"{policy:<14}{r['mean_jct_s'] / 3600:>12.2f}{r['p95_jct_s'] / 3600:>11.2f}"
              f"{r['mean_queue_s'] / 3600:>13.2f}{r['utilization']:>7.3f}{r['effective_utilization']:>10.3f}"
              f"{r['minimal_spread_share']:>21.1%}")
    print("effective utilization weighs GPU-time by each job's placement speed factor (priced with wanka.comm)")


if __name__ == "__main__":
    run()
