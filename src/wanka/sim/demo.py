"""`make demo` section: the digital twin on the default cluster (wanka-10k, a 405B-class job).

Runs the `wanka-10k-405b` preset for a few Monte-Carlo runs, compares recovery policies on the same
failures, then trains the telemetry failure predictor and shows what draining before predicted
failures does to ETTR. About 5-10 s on a laptop core.
"""

from __future__ import annotations

from wanka.output import console as output_console

from wanka.output import table
from wanka.sim import compile_scenario, load_scenario, parse_scenario, simulate

RUNS = 4


def _variant(sc, **changes):
    data = sc.model_dump(exclude_none=True)
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    return parse_scenario(data)


def run() -> None:
    console = output_console()
    sc = load_scenario("wanka-10k-405b")
    out = simulate(compile_scenario(sc), runs=RUNS)
    job, e = out["job"], out["ettr"]
    console.print(f"{job['gpus']:,} GPUs of {out['cluster']} train {sc.jobs[0].model} for {sc.duration_days:g} days "
                  f"(step {job['step_time_s'] or 0:.1f} s from the planner), Llama 3 failure rates, {RUNS} runs:")
    console.print(f"  ETTR {e['mean']:.3f} (95% of runs {e['ci95'][0]:.3f}-{e['ci95'][1]:.3f}), "
                  f"{out['interruptions']['unexpected']['mean']:.0f} unexpected + "
                  f"{out['interruptions']['planned']['mean']:.0f} planned interruptions, MTTF {out['mttf_h']['mean']:.1f} h")

    storage_only = {"memory": None, "policy": "young", "mode": "sync"}
    rows = []
    for label, variant in [
        ("restart, sync ckpt", _variant(sc, checkpoint=storage_only, recovery={"kind": "full_restart", "restart_s": 600})),
        ("restart, async ckpt", _variant(sc, checkpoint={**storage_only, "mode": "async"}, recovery={"kind": "full_restart", "restart_s": 600})),
        ("spares + 2-level ckpt", sc),
        ("torchft + 2-level", _variant(sc, recovery={"kind": "torchft"})),
    ]:
        o = simulate(compile_scenario(variant), runs=RUNS)
        lost = o["lost_gpu_hours"]
        rows.append([label, o["ettr"]["mean"], o["checkpoint"]["interval_s"] / 60, lost["lost_work"]["mean"],
                     lost["restart"]["mean"], lost["checkpoint_stall"]["mean"], lost["degraded"]["mean"]])
    console.print(table("recovery policies on the same failures (lost GPU-hours, mean)",
                        ["policy", "ETTR", "ckpt min", "lost work", "restart", "stall", "degraded"], rows))

    from wanka.reliability.predictor import train_and_evaluate, twin_prediction  # noqa: PLC0415 (sklearn)

    report = train_and_evaluate(compile_scenario(sc).config.failures, nodes=300, hours=96, seed=0)
    console.print(f"failure predictor on held-out simulated days: precision {report.precision:.2f}, recall "
                  f"{report.recall:.2f} ({report.recall_with_precursor:.2f} of failures with precursors), median lead "
                  f"{report.lead_time_h_median:.1f} h, {report.false_alarms_per_node_day:.4f} false alarms per node-day")
    base = _variant(sc, checkpoint={**storage_only, "policy": "fixed", "interval_s": 3600})
    off = simulate(compile_scenario(base), runs=RUNS)
    on = simulate(compile_scenario(_variant(base, prediction=twin_prediction(report))), runs=RUNS)
    console.print(f"drain-and-migrate before predicted failures (hourly sync checkpoints): ETTR "
                  f"{off['ettr']['mean']:.4f} -> {on['ettr']['mean']:.4f}, "
                  f"{on['prediction']['averted_failures']['mean']:.1f} failures averted, "
                  f"{on['prediction']['false_drains']['mean']:.1f} false drains per run")


if __name__ == "__main__":
    run()
