"""A self-contained HTML report of `wanka sched compare`: a table and bar charts as base64 PNGs."""

from __future__ import annotations

import base64
import html
import io

from wanka.output import check_report_path, fmt

COLUMNS = ["policy", "mean_jct_s", "p95_jct_s", "mean_queue_s", "utilization", "effective_utilization",
           "minimal_spread_share", "fragmentation", "preemptions", "backfilled"]
CHARTS = [("mean_jct_s", "mean JCT (s)"), ("p95_jct_s", "p95 JCT (s)"),
          ("utilization", "utilization (allocated)"), ("effective_utilization", "utilization (effective)"),
          ("minimal_spread_share", "gangs at minimal spread"), ("fragmentation", "fragmentation")]


def _chart(rows: list[dict], key: str, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 2.6))
    names = [r["policy"] for r in rows]
    ax.barh(names, [r.get(key) or 0 for r in rows], color="#4c72b0")
    ax.set_title(title, fontsize=10)
    ax.invert_yaxis()
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_report(rows: list[dict], path: str) -> None:
    target = check_report_path(path)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(r.get(c)))}</td>" for c in COLUMNS) + "</tr>"
                   for r in rows)
    imgs = "".join(f'<img alt="{html.escape(t)}" src="data:image/png;base64,{_chart(rows, k, t)}">'
                   for k, t in CHARTS)
    first = rows[0] if rows else {}
    title = (f"wanka sched compare: {first.get('trace', '')} on {first.get('cluster', '')} "
             f"({first.get('cluster_gpus', '')} GPUs)")
    note = f"skipped rows: {first.get('skipped_rows', 0)} {html.escape(str(first.get('skipped', {})))}"
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
           "td:first-child{text-align:left}img{margin:4px}</style></head><body>"
           f"<h2>{html.escape(title)}</h2><p>{note}</p><table><tr>{head}</tr>{body}</table>{imgs}</body></html>")
    target.write_text(doc)
