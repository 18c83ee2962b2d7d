"""`wanka sched replay` and `wanka sched compare` (docs/sched.md "CLI").

    wanka sched replay --trace philly --cluster wanka-10k --gpus 2400 --policy topo-bestfit --json
    wanka sched compare --trace philly --cluster wanka-10k --gpus 2400 --report sched.html
    wanka sched compare --trace synthetic --seed 1 --jobs 2000 --load 0.8 --json
"""

from __future__ import annotations

import argparse
import math

from rich.console import Console

from wanka.cli import json_flag, needs_subcommand
from wanka.cluster import DEFAULT_CLUSTER, load_cluster
from wanka.errors import SpecError
from wanka.output import check_report_path, fmt, table
from wanka.sched.report import write_report
from wanka.sched.runs import DEFAULT_POLICIES, load_workload, parse_policy, parse_quotas, run_policy


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default="philly", help="philly | synthetic | a CSV file (see docs/sched.md)")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help="cluster preset or spec file")
    p.add_argument("--gpus", type=int, default=None, help="resize the cluster to N GPUs")
    p.add_argument("--scale", type=float, default=1.0, help="arrival-rate multiplier (compresses inter-arrival times)")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N jobs of the trace")
    p.add_argument("--skip-bad-rows", action="store_true", help="skip bad trace rows and report them")
    p.add_argument("--seed", type=int, default=0, help="synthetic mix: random seed")
    p.add_argument("--jobs", type=int, default=2000, help="synthetic mix: number of jobs")
    p.add_argument("--load", type=float, default=0.8, help="synthetic mix: offered load (fraction of the GPUs)")
    p.add_argument("--quotas", default=None,
                   help="per-tenant GPU quotas TENANT=GPUS,... or 'share' (by each tenant's GPU-s); borrowing allowed")
    p.add_argument("--spare-nodes", type=int, default=0, help="hot-spare nodes held out of scheduling")
    p.add_argument("--spread-wait", type=float, default=0.0,
                   help="seconds a gang may wait for a minimal-spread placement (Slurm --switches=N@max-wait)")
    json_flag(p)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sched", help="topology-aware gang scheduler: trace replay and policy comparison")
    ssub = p.add_subparsers(dest="sched_command", metavar="{replay,compare}")
    rp = ssub.add_parser("replay", help="replay a trace under one policy")
    _common(rp)
    rp.add_argument("--policy", default="topo-bestfit", help="PLACEMENT[/QUEUE][/nobf], e.g. first-fit/sjf")
    rp.add_argument("--queue", default=None, help="fifo | priority | sjf (overrides the policy's queue)")
    rp.add_argument("--no-backfill", action="store_true", help="no EASY backfill")
    rp.set_defaults(func=cmd_replay)
    cp = ssub.add_parser("compare", help="replay a trace under several policies, one row each")
    _common(cp)
    cp.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated policy strings")
    cp.add_argument("--report", default=None, help="write a self-contained HTML report with plots here")
    cp.set_defaults(func=cmd_compare)
    p.set_defaults(func=needs_subcommand("replay | compare", "wanka sched replay --trace philly"))


def _setup(args, policies: list[str]):
    """Check every flag before the (slow) replay; then load the cluster and the workload."""
    for p in policies:
        parse_policy(p)
    if args.gpus is not None and args.gpus < 1:
        raise SpecError("--gpus", "an integer >= 1", args.gpus)
    if args.limit is not None and args.limit < 1:
        raise SpecError("--limit", "an integer >= 1", args.limit)
    if args.seed < 0:  # numpy's SeedSequence rejects negative seeds with a traceback
        raise SpecError("--seed", "an integer >= 0", args.seed)
    if not (0 < args.scale < math.inf):  # every trace, synthetic too; NaN fails this test as well
        raise SpecError("--scale", "a finite arrival-rate multiplier > 0", args.scale)
    report = getattr(args, "report", None)
    if report:  # checked before the (slow) replays, not after them
        check_report_path(report)
    if args.quotas and args.quotas != "share":
        parse_quotas(args.quotas)
    cluster = load_cluster(args.cluster, **({"gpus": args.gpus} if args.gpus else {}))
    work = load_workload(args.trace, cluster, skip_bad_rows=args.skip_bad_rows, limit=args.limit,
                         scale=args.scale, seed=args.seed, jobs=args.jobs, load=args.load)
    return cluster, work, parse_quotas(args.quotas, work.jobs, cluster.gpus)


def cmd_replay(args):
    policy = args.policy
    if args.queue:
        policy = "/".join([policy.split("/")[0], args.queue] + [p for p in policy.split("/")[1:] if p == "nobf"])
    if args.no_backfill and "nobf" not in policy:
        policy += "/nobf"
    cluster, work, quotas = _setup(args, [policy])
    row = run_policy(cluster, work, policy, quotas=quotas, spare_nodes=args.spare_nodes,
                     spread_wait_s=args.spread_wait)

    def render(console: Console) -> None:
        _header(console, row)
        keys = [k for k in row if not isinstance(row[k], dict) and k not in ("trace", "cluster", "policy")]
        console.print(table(f"policy {policy}", ["metric", "value"], [[k, row[k]] for k in keys]))
        for tenant, v in row.get("tenants", {}).items():
            console.print(f"  tenant {tenant}: share {fmt(v['share'])}, quota share {fmt(v['quota_share'])}")

    return row, render


# the terminal view: (JSON key, header, scale); seconds shown in hours to fit 80 columns
VIEW = [("policy", "policy", None), ("mean_jct_s", "JCT h", 3600), ("p95_jct_s", "p95 h", 3600),
        ("mean_queue_s", "wait h", 3600), ("utilization", "util", None), ("effective_utilization", "eff", None),
        ("minimal_spread_share", "minspr", None), ("fragmentation", "frag", None)]


def _cell(value, scale):
    if value is None or scale is None:
        return value
    return round(value / scale, 2)


def cmd_compare(args):
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        raise SpecError("--policies", "at least one policy string", args.policies)
    cluster, work, quotas = _setup(args, policies)
    rows = [run_policy(cluster, work, p, quotas=quotas, spare_nodes=args.spare_nodes,
                       spread_wait_s=args.spread_wait) for p in policies]
    if args.report:
        write_report(rows, args.report)

    def render(console: Console) -> None:
        _header(console, rows[0])
        console.print(table("one row per policy (JSON and --report carry every metric)", [h for _, h, _ in VIEW],
                            [[_cell(r.get(k), sc) for k, _, sc in VIEW] for r in rows]))
        if args.report:
            console.print(f"report written to {args.report}")

    return rows, render


def _header(console: Console, row: dict) -> None:
    console.print(f"[bold]{row['trace']}[/bold]: {row['jobs']:,} jobs on {row['cluster']} "
                  f"({row['cluster_gpus']:,} GPUs), offered load {fmt(row['offered_load'])}, "
                  f"skipped rows {row['skipped_rows']} {row['skipped'] or ''}")

