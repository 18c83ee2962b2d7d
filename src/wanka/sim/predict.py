"""Predictor -> twin: train the telemetry failure predictor on a scenario's failure model, then run
the twin with and without drain-and-migrate before predicted failures, on the same seeds."""

from __future__ import annotations

from wanka.sim.compile import compile_scenario, failure_model_of
from wanka.sim.outputs import simulate
from wanka.sim.scenario import Scenario, parse_scenario


def drain_study(sc: Scenario, runs: int | None = None, seed: int | None = None, nodes: int = 300,
                hours: int = 96, drain_s: float = 120.0) -> dict:
    from wanka.reliability.predictor import train_and_evaluate, twin_prediction  # noqa: PLC0415 (sklearn)

    seed = sc.seed if seed is None else seed
    report = train_and_evaluate(failure_model_of(sc), nodes=nodes, hours=hours, seed=seed)
    data = sc.model_dump(exclude_none=True)
    data["prediction"] = twin_prediction(report, drain_s)
    off = simulate(compile_scenario(sc), runs=runs, seed=seed)
    on = simulate(compile_scenario(parse_scenario(data, "prediction")), runs=runs, seed=seed)
    pick = lambda o: {"ettr": o["ettr"], "unexpected": o["interruptions"]["unexpected"],  # noqa: E731
                      "lost_gpu_hours": {k: v["mean"] for k, v in o["lost_gpu_hours"].items()}, **o["prediction"]}
    return {"scenario": sc.name, "predictor": {**report.to_dict(), "train_nodes": nodes, "train_hours": hours,
                                               "held_out_seed": seed + 1},
            "prediction": data["prediction"], "without_drain": pick(off), "with_drain": pick(on)}
