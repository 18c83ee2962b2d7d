"""Digital-twin speed: simulated GPU-hours per wall second.

    .venv/bin/python benchmarks/sim_speed.py

Goal (issue 4): 16,384 GPUs x 54 days x 100 runs in <= 10 s. Also 131,072 GPUs x 30 days x 20 runs.
Failure arrivals are drawn from the superposed Poisson process of all causes, never per GPU per hour.
"""

from __future__ import annotations

import time

from wanka.sim import compile_scenario, load_scenario, simulate
from wanka.sim.sweep import with_param

CASES = [("llama3-54d", 16384, 54, 100), ("llama3-54d", 131072, 30, 20)]


def main() -> None:
    print(f"{'scenario':<12} {'GPUs':>8} {'days':>5} {'runs':>5} {'events/run':>11} {'seconds':>8} {'GPU-h/s':>10}")
    for name, gpus, days, runs in CASES:
        sc = load_scenario(name, duration_days=days)
        if gpus != (sc.jobs[0].gpus or 0):
            sc = with_param(sc, "gpus", gpus)
        comp = compile_scenario(sc)
        start = time.perf_counter()
        out = simulate(comp, runs=runs)
        secs = time.perf_counter() - start
        events = out["interruptions"]["unexpected"]["mean"] + out["interruptions"]["planned"]["mean"]
        gpu_h = gpus * days * 24 * runs
        print(f"{name:<12} {gpus:>8,} {days:>5} {runs:>5} {events:>11,.0f} {secs:>8.2f} {gpu_h / secs:>10.3g}"
              f"   ETTR {out['ettr']['mean']:.3f}")


if __name__ == "__main__":
    main()
