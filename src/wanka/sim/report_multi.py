"""`--report out.html` for multi-job scenarios: one run's schedule (a Gantt chart of each job's
state), ETTR per job with its 95% interval over runs, and lost GPU-hours by category per job."""

from __future__ import annotations

import html

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from wanka.sim.report import _png  # noqa: E402

STATE_COLORS = {"computing": "#2b8a3e", "restarting": "#e03131", "queued": "#f08c00"}


def gantt_png(trace: list, names: list[str], duration_s: float) -> str:
    fig, ax = plt.subplots(figsize=(9, 0.5 + 0.45 * len(names)))
    last: dict[int, tuple[float, str]] = {}
    for t, j, state in sorted(trace, key=lambda x: x[0]) + [(duration_s, j, "end") for j in range(len(names))]:
        if j in last:
            t0, prev = last[j]
            if prev in STATE_COLORS and t > t0:
                ax.barh(j, (t - t0) / 86400.0, left=t0 / 86400.0, color=STATE_COLORS[prev], height=0.6, lw=0)
        last[j] = (t, state)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("day")
    ax.set_xlim(0, duration_s / 86400.0)
    handles = [matplotlib.patches.Patch(color=c, label=k) for k, c in STATE_COLORS.items()]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize=8, frameon=False)
    return _png(fig)


def jobs_png(out: dict) -> str:
    jobs = out["jobs"]
    names = [j["name"] for j in jobs]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 0.8 + 0.45 * len(jobs)))
    means = [j["ettr"]["mean"] or 0.0 for j in jobs]
    lo = [m - (j["ettr"]["ci95"][0] if j["ettr"]["ci95"][0] is not None else m) for m, j in zip(means, jobs)]
    hi = [(j["ettr"]["ci95"][1] if j["ettr"]["ci95"][1] is not None else m) - m for m, j in zip(means, jobs)]
    ax1.barh(names, means, xerr=[lo, hi], color="#1971c2", capsize=3)
    ax1.set_xlabel("ETTR (mean, 95% of runs)")
    ax1.set_xlim(0, 1)
    ax1.invert_yaxis()
    left = [0.0] * len(jobs)
    for key in jobs[0]["lost_gpu_hours"]:
        vals = [j["lost_gpu_hours"][key]["mean"] or 0.0 for j in jobs]
        ax2.barh(names, vals, left=left, label=key)
        left = [a + b for a, b in zip(left, vals)]
    ax2.set_xlabel("lost GPU-hours by category (mean)")
    ax2.invert_yaxis()
    ax2.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def write_multi_report(sc, out: dict, path: str) -> None:
    names = [j["name"] for j in out["jobs"]]
    gantt = gantt_png(out.get("_trace") or [], names, sc.duration_days * 86400.0)
    bars = jobs_png(out)
    rows = "".join(f"<tr><td>{html.escape(j['name'])}</td><td>{j['gpus']:,}</td><td>{(j['ettr']['mean'] or 0):.4f}</td>"
                   f"<td>{j['finished']['mean']:.2f}</td><td>{j['interruptions']['mean']:.1f}</td></tr>" for j in out["jobs"])
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>wanka twin: {html.escape(sc.name)}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:2em auto}} td{{padding:2px 10px}}</style></head><body>
<h1>{html.escape(sc.name)}</h1><p>{html.escape(sc.description)}</p>
<p>{len(names)} jobs on {html.escape(out['cluster'])}, {sc.duration_days:g} days, {out['runs']} runs, seed {out['seed']};
recovery {html.escape(out['recovery'])}. Cluster goodput {out['cluster_goodput']['mean']:.4f}; ETTR job-weighted
{out['ettr_job_weighted'] or 0:.4f}, GPU-hour-weighted {out['ettr_gpu_hour_weighted'] or 0:.4f}.</p>
<table><tr><th>job</th><th>GPUs</th><th>ETTR</th><th>finished</th><th>interruptions</th></tr>{rows}</table>
<h2>One run's schedule</h2><img src="data:image/png;base64,{gantt}">
<h2>Jobs</h2><img src="data:image/png;base64,{bars}"></body></html>"""
    try:
        with open(path, "w") as fh:
            fh.write(page)
    except OSError as exc:
        from wanka.errors import SpecError  # noqa: PLC0415

        raise SpecError("--report", "a writable file path", path) from exc
