"""`--report out.html`: a self-contained page (PNG plots embedded as base64) for one scenario.

Plots: one run's timeline (progress and down time), ETTR against the checkpoint interval (a short
sweep around the chosen interval), and lost GPU-hours by category plus interruptions by cause.
"""

from __future__ import annotations

import base64
import html
import io
import math

import matplotlib
import matplotlib.patches

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from wanka.sim.compile import compile_scenario  # noqa: E402
from wanka.sim.outputs import simulate  # noqa: E402
from wanka.sim.scenario import Scenario  # noqa: E402
from wanka.sim.sweep import with_param  # noqa: E402

COLORS = {"running": "#2b8a3e", "restart": "#e03131", "waiting_for_spares": "#f08c00", "planned": "#1971c2"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def timeline_png(trace: list, duration_s: float) -> str:
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    xs, ys = [0.0], [0.0]
    ax2.axvspan(0.0, duration_s / 86400.0, color=COLORS["running"], lw=0)
    for t0, t1, state, progress in trace:
        xs.append(t1 / 86400.0)
        ys.append(progress / 3600.0)
        if state != "running":  # drawn over the running background, at least a hairline wide
            ax2.axvspan(t0 / 86400.0, t1 / 86400.0, color=COLORS.get(state, "grey"), lw=0.8)
    ax1.plot(xs, ys, color="#222")
    ax1.plot([0, duration_s / 86400.0], [0, duration_s / 3600.0], ls="--", color="grey", label="no failures")
    ax1.set_ylabel("useful progress (h)")
    ax1.legend(loc="upper left")
    ax2.set_yticks([])
    ax2.set_xlabel("day")
    handles = [matplotlib.patches.Patch(color=c, label=k.replace("_", " ")) for k, c in COLORS.items()]
    ax2.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8, frameon=False)
    return _png(fig)


def interval_png(sc: Scenario, chosen_s: float, runs: int, seed: int) -> tuple[str, list]:
    if not math.isfinite(chosen_s) or chosen_s <= 0:
        chosen_s = 3600.0
    points = []
    for f in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0):
        out = simulate(compile_scenario(with_param(sc, "checkpoint_interval", chosen_s * f)), runs=runs, seed=seed)
        points.append((chosen_s * f, out["ettr"]["mean"], *out["ettr"]["mean_ci95"]))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = [p[0] / 60 for p in points]
    ax.errorbar(x, [p[1] for p in points], yerr=[[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]],
                marker="o", capsize=3)
    ax.axvline(chosen_s / 60, ls="--", color="grey", label=f"policy {sc.checkpoint.policy}: {chosen_s / 60:.1f} min")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (min)")
    ax.set_ylabel("ETTR")
    ax.legend()
    return _png(fig), points


def losses_png(out: dict) -> str:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
    lost = {k: v["mean"] for k, v in out["lost_gpu_hours"].items()}
    ax1.barh(list(lost), list(lost.values()), color="#e8590c")
    ax1.set_xlabel("lost GPU-hours (mean over runs)")
    causes = sorted(((v["mean"], k) for k, v in out["interruptions"]["by_cause"].items()), reverse=True)[:12]
    ax2.barh([k for _, k in causes][::-1], [v for v, _ in causes][::-1], color="#5f3dc4")
    ax2.set_xlabel("unexpected interruptions by cause (mean)")
    fig.tight_layout()
    return _png(fig)


def write_report(sc: Scenario, out: dict, path: str, runs: int, seed: int) -> None:
    comp_interval = out["checkpoint"]["interval_s"]
    trace = out.get("_trace") or []
    timeline = timeline_png(trace, sc.duration_days * 86400.0)
    interval, points = interval_png(sc, comp_interval, max(1, min(runs, 5)), seed)
    losses = losses_png(out)
    e = out["ettr"]
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v['mean']:,.0f}</td></tr>" for k, v in out["lost_gpu_hours"].items())
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>wanka twin: {html.escape(sc.name)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}} td{{padding:2px 10px}}</style></head><body>
<h1>{html.escape(sc.name)}</h1><p>{html.escape(sc.description)}</p>
<p>{out['job']['gpus']:,} GPUs on {html.escape(out['cluster'])}, {sc.duration_days:g} days, {runs} runs, seed {seed};
recovery {html.escape(out['recovery'])}, checkpoint {html.escape(str(out['checkpoint']['policy']))}
({html.escape(str(out['checkpoint']['mode']))}) every {comp_interval / 60:.1f} min.</p>
<p><b>ETTR {e['mean']:.4f}</b> (95% of runs in [{e['ci95'][0]:.4f}, {e['ci95'][1]:.4f}]);
unexpected interruptions {out['interruptions']['unexpected']['mean']:.1f}, planned {out['interruptions']['planned']['mean']:.1f};
MTTF {out['mttf_h']['mean']:.2f} h.</p>
<h2>One run</h2><img src="data:image/png;base64,{timeline}">
<h2>ETTR against checkpoint interval</h2><img src="data:image/png;base64,{interval}">
<h2>Losses</h2><table><tr><th>category</th><th>GPU-hours</th></tr>{rows}</table>
<img src="data:image/png;base64,{losses}"></body></html>"""
    try:
        with open(path, "w") as fh:
            fh.write(page)
    except OSError as exc:
        from wanka.errors import SpecError  # noqa: PLC0415

        raise SpecError("--report", "a writable file path", path) from exc
