"""Digital-twin speed: simulated GPU-hours per wall second.

    .venv/bin/python benchmarks/sim_speed.py

Goal (issue 4): 16,384 GPUs x 54 days x 100 runs in <= 10 s. Also 131,072 GPUs x 30 days x 20 runs.
Failure arrivals are drawn from the superposed Poisson process of all causes, never per GPU per hour.
Two more lines: the same S1 job with ToR crashes as leaf-wide failures (failure model
llama3-h100-topo), and the five-job wanka-10k-shared scenario through the scheduler.

    .venv/bin/python benchmarks/sim_speed.py --fleet     # only the whole-cluster Philly twin
    .venv/bin/python benchmarks/sim_speed.py --goodput   # only `plan --objective goodput`, 405B on wanka-10k

Goal (issue 13): the whole-cluster twin, Philly (82,247 jobs, the whole trace compressed into the
horizon) on 10,240 GPUs x 30 days x 10 runs in <= 30 s. Trace parsing is timed apart (once).
Goodput planning (issue 13): llama3-405b on wanka-10k with Llama 3 failure rates in <= 20 s.
"""

from __future__ import annotations

import sys
import time

from wanka.cluster import load_cluster
from wanka.sim import compile_scenario, load_scenario, simulate
from wanka.sim.sweep import with_param

CASES = [("llama3-54d", 16384, 54, 100, None), ("llama3-54d", 131072, 30, 20, None),
         ("llama3-54d", 16384, 54, 100, "llama3-h100-topo")]


FLEET_GOAL_S = 30.0


def fleet() -> None:
    """The whole-cluster twin in one process (wall and CPU seconds), then with the runs spread over the
    machine's cores (the runs are independent; the output must be identical)."""
    import os  # noqa: PLC0415

    from wanka.sim.fleet import FleetConfig, load_fleet_trace, simulate_fleet  # noqa: PLC0415
    from wanka.sim.fleet_cli import PHILLY_SPAN_DAYS  # noqa: PLC0415

    cfg = FleetConfig(gpus=10240, days=30)
    start = time.perf_counter()
    tr = load_fleet_trace("philly", scale=PHILLY_SPAN_DAYS / cfg.days)
    load_s = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    out = simulate_fleet(cfg, tr, runs=10, seed=1)
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"fleet: philly {out['jobs_arrived']:,} jobs on {cfg.gpus:,} GPUs x {cfg.days:g} d x 10 runs, 1 process: "
          f"{secs:.1f} s wall, {cpu:.1f} s CPU (goal <= {FLEET_GOAL_S:.0f} s wall: "
          f"{'met' if secs <= FLEET_GOAL_S else 'NOT met'}); trace parsed once in {load_s:.1f} s; goodput "
          f"{out['cluster_goodput']['mean']:.3f}, utilization {out['utilization']['mean']:.3f}, "
          f"{out['job_interruptions']['mean']:.0f} job interruptions/run, accounting error {out['accounting_max_error_s']:.1e} s")
    workers = os.cpu_count() or 1
    if workers > 1:
        start = time.perf_counter()
        par = simulate_fleet(cfg, tr, runs=10, seed=1, workers=workers)
        psecs = time.perf_counter() - start
        print(f"fleet: same, {workers} worker processes: {psecs:.1f} s wall ({secs / psecs:.2f}x the 1-process wall; "
              f"goal <= {FLEET_GOAL_S:.0f} s: {'met' if psecs <= FLEET_GOAL_S else 'NOT met'}); output identical to "
              f"1 process: {par == out}")


GOODPUT_GOAL_S = 20.0


def goodput() -> None:
    from wanka.sim.goodput import plan_goodput  # noqa: PLC0415
    from wanka.workload import load_model  # noqa: PLC0415

    start, cpu = time.perf_counter(), time.process_time()
    out = plan_goodput(load_model("llama3-405b"), "wanka-10k")
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    c, b = out["chosen"], out["baseline"]
    print(f"goodput plan: llama3-405b on wanka-10k, {out['plans_evaluated']} plans: {secs:.1f} s wall, {cpu:.1f} s CPU "
          f"(goal <= {GOODPUT_GOAL_S:.0f} s: {'met' if secs <= GOODPUT_GOAL_S else 'NOT met'}); chosen {c['kind']} "
          f"{c['spare_nodes']} spare nodes, ETTR {c['ettr']:.3f}, {c['tokens_per_day'] / 1e9:.2f}B tokens/day "
          f"(95% CI {c['tokens_per_day_ci95'][0] / 1e9:.2f}-{c['tokens_per_day_ci95'][1] / 1e9:.2f}) vs baseline "
          f"ETTR {b['ettr']:.3f}, {b['tokens_per_day'] / 1e9:.2f}B "
          f"({b['tokens_per_day_ci95'][0] / 1e9:.2f}-{b['tokens_per_day_ci95'][1] / 1e9:.2f}); beats: {out['beats_baseline']}")


def main() -> None:
    if "--goodput" in sys.argv:
        goodput()
        return
    if "--fleet" in sys.argv:
        fleet()
        return
    print(f"{'scenario':<12} {'GPUs':>8} {'days':>5} {'runs':>5} {'events/run':>11} {'seconds':>8} {'GPU-h/s':>10}")
    for name, gpus, days, runs, failures in CASES:
        sc = load_scenario(name, duration_days=days, failures={"model": failures} if failures else None)
        if gpus != (sc.jobs[0].gpus or 0):
            sc = with_param(sc, "gpus", gpus)
        comp = compile_scenario(sc)
        start = time.perf_counter()
        out = simulate(comp, runs=runs)
        secs = time.perf_counter() - start
        events = out["interruptions"]["unexpected"]["mean"] + out["interruptions"]["planned"]["mean"]
        gpu_h = gpus * days * 24 * runs
        print(f"{name:<12} {gpus:>8,} {days:>5} {runs:>5} {events:>11,.0f} {secs:>8.2f} {gpu_h / secs:>10.3g}"
              f"   ETTR {out['ettr']['mean']:.3f}" + (f"  ({failures})" if failures else ""))
    from wanka.sim.multijob import simulate_cluster  # noqa: PLC0415

    sc = load_scenario("wanka-10k-shared")
    start = time.perf_counter()
    out = simulate_cluster(sc, runs=20)
    secs = time.perf_counter() - start
    gpus = load_cluster(sc.cluster).gpus
    gpu_h = gpus * sc.duration_days * 24 * 20
    print(f"{sc.name:<12} {gpus:>8,} {sc.duration_days:>5g} {20:>5} {out['failures']['mean']:>11,.0f} {secs:>8.2f} "
          f"{gpu_h / secs:>10.3g}   {len(sc.jobs)} jobs via the scheduler, cluster goodput {out['cluster_goodput']['mean']:.3f}")
    fleet()


if __name__ == "__main__":
    main()
