"""The digital twin: weeks of a 10k-100k-GPU cluster with failures, checkpoints and recovery.

    from wanka.sim import load_scenario, compile_scenario, simulate
    out = simulate(compile_scenario(load_scenario("llama3-54d")), runs=20)
    out["ettr"]["mean"], out["interruptions"]["unexpected"]["mean"]
"""

from wanka.sim.compile import Compiled, compile_scenario
from wanka.sim.outputs import simulate
from wanka.sim.scenario import Scenario, load_scenario, parse_scenario, scenario_names

__all__ = ["Compiled", "Scenario", "compile_scenario", "load_scenario", "parse_scenario", "scenario_names", "simulate"]
