"""Fit a cluster's few global efficiency constants to measured runs (`wanka plan calibrate`,
docs/plan.md "Calibrate").

    wanka plan calibrate --runs runs/ --cluster my-cluster.yaml --out my-cluster-calibrated.yaml

What is fitted: multipliers on the planner's global constants -- GEMM efficiency, attention
efficiency, HBM efficiency (wanka.plan.efficiency) and link efficiency (wanka.comm) -- one each for
the whole cluster, never per run (ClusterSpec.efficiency). Nothing else moves: the mechanisms stay
as modelled, so a calibrated profile can only absorb what a constant can (a slower GEMM library,
a derated network), not a missing mechanism.

Measured runs: published-run rows (the JSON schema of `wanka plan validate`, with tokens/s or
iteration time) and `wanka train` run directories (run.json, events.jsonl's start event for the
layout and world size, metrics.jsonl for step times: the median after WARMUP_STEPS steps). Each is
priced on the given cluster resized to the run's GPU count.

Fit: minimise the mean squared ln(predicted / measured step time) plus RIDGE * sum(ln scale)^2
over ln(scale) in [ln 1/100, ln 20], by coordinate descent (a coarse grid then golden-section per
constant; the first round over the whole range, the next ones in a window
halving each round around the best, ROUNDS rounds). The ridge is an assumption: it keeps a constant the runs cannot see (the
network, for runs on one GPU) at the value it had. Error before/after is leave-one-out (k-fold with
FOLDS folds above LOO_MAX runs): each run is predicted by constants fitted without it.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.exposure import Options

CONSTANTS = ("gemm", "attention", "hbm", "network")
WARMUP_STEPS = 2  # the first steps include lazy initialisation and allocator growth
RIDGE = 1e-3
ROUNDS = 6
LOO_MAX = 12
FOLDS = 5
LOW, HIGH = math.log(0.01), math.log(20.0)  # search range of a multiplier (1/100 reaches a CPU's 'GPU')


@dataclass(frozen=True)
class MeasuredRun:
    id: str
    model: object  # ModelSpec
    layout: Layout
    gpus: int
    seq_len: int
    options: Options
    step_time_s: float
    gpu: str | None = None  # catalog name of a published run's accelerator (None: measured on the cluster)


# ---- measured runs ---------------------------------------------------------------------------
def load_runs(path: str) -> tuple[list[MeasuredRun], list[str]]:
    """(runs, skipped notes) from a published-runs JSON file, a `wanka train` run directory, or a
    directory holding either."""
    from wanka.plan.published import BUILT_IN

    p = Path(path)
    if not p.exists() and (BUILT_IN / f"{path}.json").is_file():  # a built-in validate set by name
        p = BUILT_IN / f"{path}.json"
    if not p.exists():
        raise SpecError("--runs", "an existing JSON file of runs or a directory of runs / `wanka train` outputs", path)
    runs, skipped = [], []
    if p.is_dir() and (p / "metrics.jsonl").is_file():
        _add(runs, skipped, lambda: [train_run(p)], str(p))
    elif p.is_dir():
        for child in sorted(p.iterdir()):
            if child.is_dir() and (child / "metrics.jsonl").is_file():
                _add(runs, skipped, lambda c=child: [train_run(c)], str(child))
            elif child.suffix == ".json":
                more, notes = published_runs(child)
                runs += more
                skipped += notes
    elif p.name == "metrics.jsonl":
        _add(runs, skipped, lambda: [train_run(p.parent)], str(p.parent))
    else:
        more, notes = published_runs(p)
        runs += more
        skipped += notes
    return runs, skipped


def _add(runs, skipped, load, where):
    try:
        runs += load()
    except SpecError as exc:
        skipped.append(f"{where}: {exc}")


def published_runs(path: Path) -> tuple[list[MeasuredRun], list[str]]:
    from wanka.plan.published import framework_options, load_rows, row_layout, row_model
    from wanka.plan.row_measured import measured_tokens_per_gpu
    from wanka.plan.row_hardware import catalog_gpu
    from wanka.plan.run_level import run_level_reason

    out, skipped = [], []
    for row in load_rows(path):
        rid = str(row.get("id", "?"))
        try:
            model, (lay, _) = row_model(row), row_layout(row)
            gpus = int(row["hardware"]["gpu_count"])
            resolved = lay.resolve(gpus, model)
            tps, _ = measured_tokens_per_gpu(row, resolved)
            if not tps or run_level_reason(row):  # a whole run's average is not a step time
                skipped.append(f"{rid}: " + ("a whole run's average, not a step time" if tps else
                                             "no steady-state tokens/s or iteration time"))
                continue
            step = resolved.gbs * model.seq_len / (tps * gpus)
            out.append(MeasuredRun(rid, model, lay, gpus, model.seq_len, framework_options(row), step,
                                   catalog_gpu(row["hardware"].get("gpu"))))
        except (SpecError, KeyError, TypeError, ValueError) as exc:
            skipped.append(f"{rid}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return out, skipped


def train_run(run_dir: Path) -> MeasuredRun:
    """A `wanka train` output directory: run.json (model, seq_len), events.jsonl (layout, world
    size of the first start event), metrics.jsonl (step_time_s per step)."""
    from wanka.workload import load_model

    try:
        cfg = json.loads((run_dir / "run.json").read_text())
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]
        steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError("--runs", "a `wanka train` directory with run.json, events.jsonl and metrics.jsonl",
                        f"{run_dir} ({exc})") from None
    start = next((e for e in events if e.get("event") == "start"), None)
    if start is None or "layout" not in start or "world_size" not in start:
        raise SpecError("--runs", "events.jsonl with a start event (layout, world_size)", str(run_dir))
    times = [s["step_time_s"] for s in steps if isinstance(s.get("step_time_s"), (int, float))]
    if len(times) <= WARMUP_STEPS:
        raise SpecError("--runs", f"more than {WARMUP_STEPS} logged steps (the first are warm-up)", f"{run_dir}: {len(times)}")
    model = load_model(cfg["model"])
    seq = cfg.get("seq_len") or model.seq_len
    lay = Layout.parse(start["layout"], field="events.jsonl layout")
    return MeasuredRun(run_dir.name, model, lay, int(start["world_size"]), seq, Options(),
                       statistics.median(times[WARMUP_STEPS:]))


# ---- pricing and fitting ---------------------------------------------------------------------
class Pricer:
    """Step times of runs on `cluster_ref` resized to each run's GPU count, under given scales."""

    def __init__(self, cluster_ref: str):
        from wanka.cluster import load_cluster

        self.ref = cluster_ref
        base = load_cluster(cluster_ref)
        self.base_gpus = base.gpus
        eff = base.spec.efficiency
        self.start = {k: (getattr(eff, k) if eff is not None else 1.0) for k in CONSTANTS}
        self._clusters: dict = {}

    def cluster(self, gpus: int, scales: dict[str, float]):
        from wanka.cluster import load_cluster

        key = (gpus, tuple(round(scales[k], 12) for k in CONSTANTS))
        if key not in self._clusters:
            if len(self._clusters) > 64:
                self._clusters.clear()
            self._clusters[key] = load_cluster(self.ref, gpus=gpus, efficiency=dict(scales))
        return self._clusters[key]

    def step_s(self, run: MeasuredRun, scales: dict[str, float]) -> float:
        from wanka.plan.estimate import estimate

        return estimate(run.model, self.cluster(run.gpus, scales), run.layout, seq_len=run.seq_len,
                        options=run.options).step_time_s

    def same_gpu(self, runs: list[MeasuredRun]) -> tuple[list[MeasuredRun], list[str]]:
        """The runs measured on this cluster's accelerator; notes for the others (another GPU's
        runs say nothing about this cluster's constants)."""
        from wanka.cluster import load_cluster

        name = load_cluster(self.ref).gpu.name
        keep = [r for r in runs if r.gpu is None or r.gpu == name]
        return keep, [f"{r.id}: measured on {r.gpu}, the cluster has {name}" for r in runs if r not in keep]

    def check(self, runs: list[MeasuredRun]) -> None:
        """Every run must price on this cluster (its GPU count fits, its layout resolves)."""
        for r in runs:
            try:
                self.step_s(r, self.start)
            except SpecError as exc:
                raise SpecError("--runs", f"runs that price on the cluster ({r.id}: {exc})") from None


def _loss(pricer: Pricer, runs, scales, start) -> float:
    err = [math.log(pricer.step_s(r, scales) / r.step_time_s) ** 2 for r in runs]
    ridge = sum(math.log(scales[k] / start[k]) ** 2 for k in scales)
    return sum(err) / len(err) + RIDGE * ridge


def _argmin_1d(f, lo: float, hi: float) -> float:
    """A coarse grid, then golden-section inside the best grid cell's neighbours."""
    grid = [lo + (hi - lo) * i / 12 for i in range(13)]
    values = [f(x) for x in grid]
    i = min(range(len(grid)), key=values.__getitem__)
    a, b = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(18):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = min(((values[i], grid[i]), (fc, c), (fd, d)))
    return best[1]


def fit(pricer: Pricer, runs: list[MeasuredRun], constants: tuple[str, ...]) -> dict[str, float]:
    """Scales of `constants` (the others stay at the cluster's) minimising the loss on `runs`."""
    scales = dict(pricer.start)
    for rnd in range(ROUNDS):  # the first round over the whole range, then ever narrower around the best
        for k in constants:
            def f(x, k=k):
                return _loss(pricer, runs, {**scales, k: math.exp(x)}, pricer.start)
            here, half = math.log(scales[k]), 0.5 / 2 ** (rnd - 1)
            lo, hi = (LOW, HIGH) if rnd == 0 else (max(LOW, here - half), min(HIGH, here + half))
            scales[k] = math.exp(_argmin_1d(f, lo, hi))
    return scales


def held_out_errors(pricer: Pricer, runs: list[MeasuredRun], constants: tuple[str, ...]) -> tuple[list[float], list[float], str]:
    """(before, after) step-time errors (predicted / measured - 1) of each run, 'after' from
    constants fitted without it; and the scheme used."""
    n = len(runs)
    folds = [[i] for i in range(n)] if n <= LOO_MAX else [list(range(j, n, FOLDS)) for j in range(FOLDS)]
    before = [pricer.step_s(r, pricer.start) / r.step_time_s - 1 for r in runs]
    after = [0.0] * n
    for fold in folds:
        train = [r for i, r in enumerate(runs) if i not in fold]
        scales = fit(pricer, train, constants)
        for i in fold:
            after[i] = pricer.step_s(runs[i], scales) / runs[i].step_time_s - 1
    scheme = "leave-one-out" if n <= LOO_MAX else f"{FOLDS}-fold"
    return before, after, scheme


def parse_constants(text: str | None) -> tuple[str, ...]:
    if not text:
        return CONSTANTS
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names or any(x not in CONSTANTS for x in names) or len(set(names)) != len(names):
        raise SpecError("--fit", f"comma-separated names among {', '.join(CONSTANTS)}, each once", text)
    return names


def require_enough(runs: list, constants: tuple[str, ...]) -> None:
    if len(runs) < len(constants):
        raise SpecError("--runs", f"at least {len(constants)} measured runs to fit {len(constants)} constants "
                        f"({', '.join(constants)}; fewer with --fit)", f"{len(runs)} run(s)")
