"""`make demo`: the whole chain on built-in defaults, one section per layer.

cluster -> plan -> schedule -> twin -> train (with an injected failure) -> serve what was trained.
Layers that are not built yet are skipped with a note.
"""

from __future__ import annotations

import importlib
import time

from wanka.output import console as output_console
from rich.rule import Rule

from wanka.cli import main as wanka

SECTIONS = [
    ("plan", "wanka.plan.demo", "Planner: a 405B-class model on the default cluster"),
    ("sched", "wanka.sched.demo", "Scheduler: topology-aware gang placement on a real trace"),
    ("sim", "wanka.sim.demo", "Digital twin: weeks of the default cluster with failures"),
    ("train", "wanka.train.demo", "Training runtime: real training with an injected failure"),
    ("serve", "wanka.serve.demo", "Inference: serve the trained model"),
]


def main() -> int:
    console = output_console()
    console.print(Rule("Cluster: the default wanka cluster"))
    wanka(["cluster", "show"])
    exported = None
    for layer, module_name, title in SECTIONS:
        console.print(Rule(title))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name and not module_name.startswith(exc.name or "\0"):
                raise
            console.print(f"[dim]({layer} layer not built yet)[/dim]")
            continue
        start = time.perf_counter()
        result = module.run(exported) if layer == "serve" else module.run()
        if layer == "train":
            exported = result
        console.print(f"[dim]{layer} section took {time.perf_counter() - start:.1f} s[/dim]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
