"""`wanka cluster list` and `wanka cluster show NAME|FILE [--json]`."""

from __future__ import annotations

import argparse

from rich.console import Console

from wanka.cli import json_flag, needs_subcommand
from wanka.cluster.presets import DEFAULT_CLUSTER, cluster_names, load_cluster
from wanka.output import fmt, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="cluster presets and specs")
    csub = p.add_subparsers(dest="cluster_command", metavar="{list,show}")
    ls = csub.add_parser("list", help="list cluster presets")
    json_flag(ls)
    ls.set_defaults(func=cmd_list)
    show = csub.add_parser("show", help="summarise a preset or a spec file")
    show.add_argument("cluster", nargs="?", default=DEFAULT_CLUSTER, help="preset name or YAML/JSON spec file")
    json_flag(show)
    show.set_defaults(func=cmd_show)
    p.set_defaults(func=needs_subcommand("list | show", "wanka cluster list"))


def cmd_list(args):
    rows = []
    for name in cluster_names():
        c = load_cluster(name)
        rows.append({"name": name, "gpu": c.gpu.name, "gpus": c.gpus, "nodes": c.nodes,
                     "scale_up_domain": c.domain, "topology": c.scale_out.topology,
                     "peak_pflops_bf16": c.peak_pflops()["bf16"], "power_MW": c.power_MW()["facility"]})
    shown = [{**r, "peak_pflops_bf16": round(r["peak_pflops_bf16"]),
              "power_MW": None if r["power_MW"] is None else round(r["power_MW"], 1)} for r in rows]

    def render(console: Console) -> None:
        keys = ["name", "gpu", "gpus", "scale_up_domain", "topology", "peak_pflops_bf16", "power_MW"]
        heads = ["name", "gpu", "GPUs", "domain", "scale-out", "PFLOP/s bf16", "MW"]
        console.print(table("wanka cluster presets", heads, [[r[k] for k in keys] for r in shown]))

    return {"clusters": rows}, render


def cmd_show(args):
    c = load_cluster(args.cluster)
    s = c.summary()

    def render(console: Console) -> None:
        console.print(f"[bold]{s['name']}[/bold]: {s['gpus']:,} x {s['gpu']} in {s['nodes']:,} nodes of "
                      f"{s['gpus_per_node']}, scale-up domain {s['scale_up_domain']}, {s['topology']} "
                      f"({s['tiers']} tiers, {s['planes']} plane(s)), {s['campuses']} campus(es)")
        peaks = ", ".join(f"{k} {fmt(v)}" for k, v in s["peak_pflops"].items())
        console.print(f"peak PFLOP/s: {peaks}")
        p = s["power"]
        console.print(f"bisection {fmt(s['bisection_TBps'])} TB/s, {s['switches']:,} switches, "
                      f"{s['cables']:,} cables; power GPU {fmt(p['gpu'])} MW, IT {fmt(p['it'])} MW, "
                      f"facility {fmt(p['facility'])} MW (PUE {s['pue']})")
        rows = [[lv["name"], lv["span_gpus"], lv["bandwidth_GBps"], lv["latency_us"]] for lv in s["levels"]]
        console.print(table("hierarchy (per GPU, per direction)", ["level", "span GPUs", "GB/s", "latency us"], rows))
        for note in s["notes"]:
            console.print(f"- {note}")

    return s, render

