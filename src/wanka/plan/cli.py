"""`wanka plan` (search or price one layout) and `wanka plan scale` (efficiency vs cluster size).

    wanka plan --model llama3-405b --cluster wanka-10k --tokens 15T --top 5
    wanka plan --model llama3-70b --cluster meta-24k-h100 --gpus 1024 --layout "tp=8,pp=4,gbs=512" --json
    wanka plan scale --model llama3-405b --cluster wanka-10k --gpus 1024,2048,4096,8192
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re

from rich.console import Console

from wanka.cli import json_flag, positive_int_list
from wanka.specfile import MAX_EXACT_INT
from wanka.cluster import DEFAULT_CLUSTER, load_cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.output import fmt, table
from wanka.plan.a2a_overlap import overlap_refusal
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.plan.frameworks import PROFILES, framework
from wanka.plan.moe_host_sync import moe_host_sync_of_options
from wanka.plan.published import built_in_runs
from wanka.plan.search import SearchStats, search
from wanka.plan.whole_run import whole_run
from wanka.workload import load_model
from wanka.workload.activations import RECOMPUTE_MODULES

SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_tokens(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMBGTP]?)\s*", text or "", re.IGNORECASE)
    value = float(m.group(1)) * SUFFIX[m.group(2).upper()] if m else 0.0
    if not (value > 0 and math.isfinite(value)):  # 1e400 parses as inf
        raise SpecError("--tokens", "a positive number with an optional K/M/B/T suffix, like 15T", text)
    return value


def parse_gpu_list(text: str) -> list[int]:
    return positive_int_list(text, "--gpus", "1024,2048,4096")


def _positive(name: str):
    # argparse swallows a ValueError (SpecError is one) from a type function and prints "invalid conv
    # value"; ArgumentTypeError keeps our message: "argument --gpus: expected a positive integer, got '0'"
    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if not 1 <= v <= MAX_EXACT_INT:  # beyond 2**53 the planner's float arithmetic is no longer exact
            raise argparse.ArgumentTypeError(f"expected a positive integer of at most 2**53, got {text!r}")
        return v
    return conv


def short_layout(lay) -> str:
    """The layout string without keys at their defaults (for tables)."""
    keep = []
    for item in str(lay).split(","):
        if item in ("cp=1", "ep=1", "vpp=1", "precision=bf16", "pp=1", "tp=1") or item.startswith("gbs="):
            continue
        keep.append(item)
    return ",".join(keep)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="price a parallel layout or search for the best one")
    _common(p, required=False)
    p.add_argument("--gpus", type=_positive("--gpus"), help="use this many GPUs of the cluster")
    p.add_argument("--tokens", default="15T", help="token budget of the whole run (e.g. 15T)")
    p.add_argument("--gbs", type=_positive("--gbs"), help="global batch in sequences (search default: one batch "
                   "within 16M tokens; with --layout: the layout's gbs, else dp*mbs*pp, the Layout default)")
    p.add_argument("--seq", type=_positive("--seq"), help="sequence length (default: the model's)")
    p.add_argument("--top", type=_positive("--top"), default=5, help="layouts to show")
    p.add_argument("--layout", help='price this layout, e.g. "tp=8,pp=16,vpp=4,gbs=2048"')
    p.add_argument("--objective", choices=("speed", "goodput"), default="speed",
                   help="goodput: choose layout, checkpoint interval, spares and recovery with the twin (wanka.sim.goodput)")
    p.add_argument("--recompute-modules", help="what recompute=selective re-runs (Megatron-Core names): "
                   "core_attn,layernorm,mla_up_proj,moe_act (default core_attn)")
    p.add_argument("--pipeline", choices=("1f1b", "dualpipe"), default="1f1b",
                   help="pipeline schedule: 1f1b (interleaved when vpp > 1) or DeepSeek's dualpipe")
    _framework_flags(p)
    json_flag(p)
    p.set_defaults(func=cmd_plan)
    psub = p.add_subparsers(dest="plan_command", metavar="{scale,validate,calibrate}")
    v = psub.add_parser("validate", help="price published runs (a JSON file of rows) and report the error")
    v.add_argument("--runs", help="JSON list of runs with architecture/hardware/parallelism/result "
                   "(the schema of the built-in `calibration` set), or a built-in set: " + ", ".join(built_in_runs()))
    v.add_argument("--write-residuals", action="store_true", help="re-price every built-in set and store the "
                   "residual table behind the p10/p90 intervals (wanka/plan/residuals.json); run after changing a mechanism")
    v.add_argument("--fail-above", type=float, metavar="F",
                   help="exit 1 when a compared row's |error| exceeds F (e.g. 0.3)")
    json_flag(v)
    v.set_defaults(func=cmd_validate)
    from wanka.plan.calibrate_cli import register as register_calibrate

    register_calibrate(psub)
    s = psub.add_parser("scale", help="efficiency of the best layout against cluster size")
    _common(s)
    s.add_argument("--gpus", required=True, help="comma-separated GPU counts, e.g. 1024,2048,4096")
    s.add_argument("--gbs", type=_positive("--gbs"), help="global batch in sequences (default: 16M tokens)")
    s.add_argument("--seq", type=_positive("--seq"))
    json_flag(s)
    s.set_defaults(func=cmd_scale)


def _common(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--model", required=required, help="model preset or YAML/JSON spec file")
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help="cluster preset or YAML/JSON spec file")


def _cluster(name: str, gpus: int | None):
    c = load_cluster(name)
    if gpus is None or gpus == c.gpus:
        return c
    if gpus > c.gpus:
        raise SpecError("--gpus", f"at most the cluster's {c.gpus} GPUs", gpus)
    if gpus % c.gpus_per_node:
        raise SpecError("--gpus", f"a multiple of the cluster's {c.gpus_per_node} GPUs per node", gpus)
    return load_cluster(name, gpus=gpus)


def _framework_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("framework mechanisms (docs/plan.md, Options)")
    g.add_argument("--framework", metavar="NAME", help="framework profile, a documented set of the switches "
                   "below (docs/plan.md 'Framework profiles'): " + " | ".join(PROFILES) + "; explicit flags win")
    g.add_argument("--attention", choices=("flash", "flash2", "unfused"), default=None,
                   help="flash (FlashAttention, FA3 on Hopper), flash2 (FlashAttention-2 kernels, PyTorch SDPA "
                   "in 2024) or unfused (materialised scores, Megatron before 2023)")
    g.add_argument("--tp-overlap", type=float, default=None, metavar="F",
                   help="fraction of TP communication hidden under GEMMs (TE userbuffers; default 0)")
    g.add_argument("--no-dp-overlap", action="store_true", help="gradient reduce / parameter gather not overlapped")
    g.add_argument("--zero3-unit", choices=("layer", "weight"), default=None,
                   help="what one ZeRO-3 gather fetches: layer (FSDP block) or weight (DeepSpeed submodule)")
    g.add_argument("--no-zero3-grad-overlap", action="store_true",
                   help="ZeRO-3 gradient reduce-scatters on the compute stream (DeepSpeed overlap_comm=false)")
    g.add_argument("--moe-dispatcher", choices=("alltoall", "allgather"), default=None,
                   help="MoE token dispatcher (Megatron-Core --moe-token-dispatcher-type): alltoall (default here) or "
                   "allgather (Megatron-Core's own default: the TP group's tokens gathered and permuted on every rank)")
    g.add_argument("--no-moe-grouped-gemm", action="store_true",
                   help="MoE experts one after another (Megatron-Core SequentialMLP, no --moe-grouped-gemm)")
    g.add_argument("--moe-flex-dispatcher-backend", choices=("deepep", "hybridep"), default=None,
                   help="Megatron-Core's flex dispatcher backend: tokens sent once per node across the network, then "
                   "over NVLink (docs/plan.md 'MoE, hierarchical dispatch')")
    g.add_argument("--moe-dispatcher-sms", type=_positive("--moe-dispatcher-sms"), default=None, metavar="N",
                   help="SMs the flex backend's dispatch/combine kernels run on (Megatron-Core --moe-deepep-num-sms / "
                   "--moe-hybridep-num-sms; default DeepEP's 20): sets their rate inside an NVLink domain and the SMs "
                   "the EP overlap leaves to compute (docs/plan.md 'MoE, DeepEP / HybridEP inside one NVLink domain')")
    g.add_argument("--overlap-moe-expert-parallel-comm", action="store_true",
                   help="Megatron-Core's EP all-to-all overlap: one micro-batch's forward beside another's backward, "
                   "layer by layer on two streams (docs/plan.md 'MoE, all-to-all overlap across micro-batches')")
    g.add_argument("--delay-wgrad-compute", action="store_true",
                   help="with --overlap-moe-expert-parallel-comm: weight gradients off the backward chain")
    g.add_argument("--algorithm", choices=("auto", "ring", "tree", "hierarchical", "flat-ring"), default=None,
                   help="collective algorithm: auto (NCCL-style choice) or a fixed one; flat-ring = topology-unaware")


def _options(args, layout: Layout | None = None) -> Options:
    """Options from the framework profile (if any, for `layout`), then the explicit flags."""
    kw = {}
    if args.recompute_modules:
        modules = tuple(x.strip() for x in args.recompute_modules.split(",") if x.strip())
        bad = [x for x in modules if x not in RECOMPUTE_MODULES]
        if bad or not modules:
            raise SpecError("--recompute-modules", f"comma-separated names among {', '.join(RECOMPUTE_MODULES)}",
                            args.recompute_modules)
        kw["recompute_modules"] = modules
    if args.tp_overlap is not None:
        if not 0.0 <= args.tp_overlap <= 1.0:
            raise SpecError("--tp-overlap", "a fraction in [0, 1]", args.tp_overlap)
        kw["tp_overlap"] = args.tp_overlap
    for flag in ("attention", "zero3_unit", "algorithm", "moe_dispatcher"):
        if getattr(args, flag) is not None:
            kw[flag] = getattr(args, flag)
    if args.no_dp_overlap:
        kw["dp_overlap"] = False
    if args.no_zero3_grad_overlap:
        kw["zero3_grad_overlap"] = False
    if args.no_moe_grouped_gemm:
        kw["moe_grouped_gemm"] = False
    if args.moe_flex_dispatcher_backend:
        kw["moe_flex_backend"] = args.moe_flex_dispatcher_backend
    if args.moe_dispatcher_sms is not None:
        if not args.moe_flex_dispatcher_backend:
            raise SpecError("--moe-dispatcher-sms", "only with --moe-flex-dispatcher-backend (NCCL's all-to-all sets "
                            "its own CTAs)", args.moe_dispatcher_sms)
        if args.moe_dispatcher_sms > 1024:
            raise SpecError("--moe-dispatcher-sms", "a whole number of SMs, 1-1024", args.moe_dispatcher_sms)
        kw["moe_dispatcher_sms"] = args.moe_dispatcher_sms
    if args.delay_wgrad_compute and not args.overlap_moe_expert_parallel_comm:
        raise SpecError("--delay-wgrad-compute", "only with --overlap-moe-expert-parallel-comm (Megatron-Core's rule)", True)
    if args.overlap_moe_expert_parallel_comm:
        if layout is not None and (refused := overlap_refusal(layout)):
            raise SpecError("--overlap-moe-expert-parallel-comm", refused[1], str(layout))
        kw.update(moe_a2a_overlap=True, moe_delay_wgrad=args.delay_wgrad_compute, moe_shared_expert_overlap=False)
    base = Options(pipeline=args.pipeline)
    if args.framework:
        base = framework(args.framework).options(layout, base)
    return dataclasses.replace(base, **kw)


def cmd_plan(args):
    if not args.model:
        raise SpecError("--model", "a model preset name or spec file (wanka plan --model llama3-70b ...)")
    model = load_model(args.model)
    if args.objective == "goodput":
        from wanka.sim.goodput import plan_goodput, render_goodput  # noqa: PLC0415 (the twin only when asked)

        if args.layout:
            raise SpecError("--layout", "no --layout with --objective goodput (it chooses the layout)", args.layout)

        out = plan_goodput(model, args.cluster, args.gpus)
        return out, lambda console: render_goodput(console, out)
    cluster = _cluster(args.cluster, args.gpus)
    tokens = parse_tokens(args.tokens)
    stats = None
    if args.layout:
        lay = Layout.parse(args.layout, field="--layout")
        if args.gbs and lay.gbs is None:
            lay = Layout.parse(f"{args.layout},gbs={args.gbs}", field="--layout")
        elif args.gbs and lay.gbs != args.gbs:  # two batches given: do not drop one silently
            raise SpecError("--gbs", f"the layout's gbs ({lay.gbs}) or no --gbs", args.gbs)
        opts = _options(args, lay)
        best = estimate(model, cluster, lay, seq_len=args.seq, options=opts)
        candidates = None
    else:
        stats = SearchStats()
        # a profile whose switches depend on pp or the ZeRO stage (DeepSpeed) gives its base switches here
        opts = _options(args)
        candidates = search(model, cluster, gbs=args.gbs, seq=args.seq, top=args.top, options=opts, stats=stats)
        best = candidates[0]
    payload = best.to_dict() | whole_run(best, tokens, cluster)
    payload["host_sync"] = moe_host_sync_of_options(model, opts)
    if candidates is not None:
        payload["candidates"] = [c.to_dict() for c in candidates]
        payload["search"] = stats.to_dict()

    def render(console: Console) -> None:
        shown = candidates or [best]
        rows = [[i + 1, e.step_time_s, e.mfu, e.tokens_per_s_per_gpu, e.memory_GB_per_gpu, "yes" if e.fits else "NO"]
                for i, e in enumerate(shown)]
        console.print(table(f"{model.name} on {cluster.name} ({cluster.gpus:,} x {cluster.gpu.name})",
                            ["#", "step s", "MFU", "tok/s/GPU", "mem GiB", "fits"], rows))
        for i, e in enumerate(shown):
            console.print(f"#{i + 1} {short_layout(e.layout)},gbs={e.layout.gbs}", soft_wrap=True)
        br = ", ".join(f"{k} {fmt(v)}" for k, v in best.breakdown.items() if v > 0)
        console.print(f"best step breakdown (s): {br}")
        band = payload.get("uncertainty")
        if band:
            t = band["tokens_per_s_per_gpu"]
            console.print(f"tok/s/GPU p10-p90 {fmt(t['p10'])} - {fmt(t['p90'])} (residuals of {band['residual_rows']} "
                          f"published rows, class {band['class']}; docs/plan.md \"Uncertainty\")", soft_wrap=True)
        if payload["host_sync"]:
            console.print(f"MoE layers block the host once per layer forward ({payload['host_sync']}); the host's "
                          "launch time after that wait is not priced, so a thin per-GPU layer may run slower than "
                          "shown (docs/plan.md \"MoE, sixth pass\")", soft_wrap=True)
        console.print(f"{fmt(tokens)} tokens: {fmt(payload['days'])} days, {fmt(payload['gpu_hours'])} GPU-hours, "
                      f"{fmt(payload['energy_MWh'])} MWh, ${fmt(payload['cost_usd'])} electricity")
        if stats:
            console.print(f"global batch: {stats.gbs_rule}", soft_wrap=True)
            console.print(f"searched {stats.evaluated:,} layouts in {stats.seconds:.2f} s "
                          f"({stats.layouts_per_s:,.0f} layouts/s), {stats.timed:,} priced (fit, not dominated)")
            console.print("not priced: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in
                                                     sorted(stats.dropped.items(), key=lambda kv: -kv[1])), soft_wrap=True)

    return payload, render


def scale_rows(model, cluster_name: str, gpu_counts: list[int], gbs: int | None, seq: int | None) -> list[dict]:
    rows = []
    base = None
    for n in gpu_counts:
        c = _cluster(cluster_name, n)
        best = search(model, c, gbs=gbs, seq=seq, top=1)[0]
        # topology-unaware communication: flat rings over the whole fabric, the layout re-searched
        flat = search(model, c, gbs=gbs, seq=seq, top=1, options=Options(algorithm="flat-ring"))[0]
        base = base or best.tokens_per_s_per_gpu
        rows.append({"gpus": n, "layout": str(best.layout), "mfu": best.mfu, "mfu_flat_ring": flat.mfu,
                     "layout_flat_ring": str(flat.layout),
                     "tokens_per_s_per_gpu": best.tokens_per_s_per_gpu,
                     "scaling_efficiency": best.tokens_per_s_per_gpu / base, "step_time_s": best.step_time_s,
                     "breakdown": best.breakdown})
    return rows


def cmd_scale(args):
    model = load_model(args.model)
    rows = scale_rows(model, args.cluster, parse_gpu_list(args.gpus), args.gbs, args.seq)

    def render(console: Console) -> None:
        console.print(table(f"{model.name} on {args.cluster}: best layout per size (fixed batch)",
                            ["GPUs", "MFU", "MFU flat rings", "tok/s/GPU", "efficiency"],
                            [[r["gpus"], r["mfu"], r["mfu_flat_ring"], r["tokens_per_s_per_gpu"],
                              r["scaling_efficiency"]] for r in rows]))
        for r in rows:
            console.print(f"{r['gpus']:>7,}: {short_layout(r['layout'])}", soft_wrap=True)

    return {"model": model.name, "cluster": args.cluster, "rows": rows}, render


def cmd_validate(args):
    from dataclasses import asdict

    from wanka.plan.published import load_rows
    from wanka.plan.row_check import check_row
    from wanka.plan.validate_summary import summary

    if args.fail_above is not None and not (args.fail_above > 0 and math.isfinite(args.fail_above)):
        raise SpecError("--fail-above", "a positive fraction, like 0.3", args.fail_above)
    if args.write_residuals:
        return _write_residuals(args)
    if not args.runs:
        from wanka.plan.published import built_in_runs

        raise SpecError("--runs", f"a JSON file of runs or a built-in set ({', '.join(built_in_runs())}), "
                        "or --write-residuals")
    checks = [check_row(r) for r in load_rows(args.runs)]
    stats = summary(checks)
    payload = {"runs": args.runs, "summary": stats, "rows": [asdict(c) for c in checks]}
    worst = stats["max_abs_error"]
    failed = args.fail_above is not None and worst is not None and worst > args.fail_above

    def render(console: Console) -> None:
        def pair(c):
            if c.basis == "MFU":
                return f"{c.mfu_measured:.1f}% MFU", f"{c.mfu_predicted:.1f}% MFU"
            if c.basis == "HFU":
                return f"{c.hfu_measured:.1f}% HFU", f"{c.hfu_predicted:.1f}% HFU"
            return fmt(c.measured) + (" (run)" if c.basis == "run-level" else ""), fmt(c.predicted)

        rows = [[c.id, c.gpus, *pair(c), f"{c.error:+.1%}", fmt(c.memory_GiB) + ("" if c.fits else " (no fit)"),
                 "; ".join(c.assumed)] for c in checks if not c.skipped]
        console.print(table(f"published runs in {args.runs}: planner vs measured, tokens/s per GPU (MFU where the "
                            "run gives no tokens/s); error = predicted / measured - 1",
                            ["run", "GPUs", "measured", "predicted", "error", "GiB", "assumed"], rows))
        for c in checks:
            if c.skipped:
                console.print(f"skipped {c.id}: {c.skipped}", soft_wrap=True)
        if stats["compared"]:
            console.print(f"{stats['compared']} of {stats['rows']} rows compared at steady state: median |error| "
                          f"{stats['median_abs_error']:.1%}, p90 {stats['p90_abs_error']:.1%}, max "
                          f"{stats['max_abs_error']:.1%} (run-level rows not counted)")
            console.print("by framework family (median / p90 |error|, rows): " + "; ".join(
                f"{f} {v['median_abs_error']:.1%} / {v['p90_abs_error']:.1%} ({v['compared']})"
                for f, v in stats["by_family"].items()), soft_wrap=True)
            if synced := sum(1 for c in checks if c.host_sync and not c.skipped):
                console.print(f"{synced} MoE rows block the host once per layer forward (dropless routing: JSON "
                              "`host_sync` says why); the planner does not price that wait (docs/plan.md "
                              "'MoE, sixth pass')", soft_wrap=True)
        if stats["run_level"]["compared"]:
            for c in checks:
                if c.basis == "run-level" and not c.skipped:
                    console.print(f"{c.id}: steady state {fmt(c.predicted_steady_state)} x goodput {c.goodput:.1%} = "
                                  f"{fmt(c.predicted)} vs run average {fmt(c.measured)} tokens/s per GPU; "
                                  f"{c.goodput_detail['inputs']}", soft_wrap=True)
            console.print(f"{stats['run_level']['compared']} run-level rows (whole-run averages, priced as steady "
                          f"state x expected goodput): median |error| {stats['run_level']['median_abs_error']:.1%}")
        if stats["p10_p90_coverage"] is not None:
            console.print(f"measured value inside the predicted p10-p90 interval: {stats['p10_p90_coverage']:.0%} of rows "
                          "(built-in rows judged with their own configuration left out)")
        if failed:
            console.print(f"max |error| {worst:.1%} exceeds --fail-above {args.fail_above:.1%}")

    if failed:
        payload["exit_code"] = 1
    return payload, render


def _write_residuals(args):
    from wanka.plan.uncertainty import TABLE, write_residuals

    if args.runs:
        raise SpecError("--runs", "no --runs with --write-residuals (the table is built from every built-in set)", args.runs)
    table = write_residuals()
    counts: dict[str, int] = {}
    for r in table["rows"]:
        counts[r["class"]] = counts.get(r["class"], 0) + 1
    payload = {"written": str(TABLE), "sets": table["sets"], "rows": len(table["rows"]), "rows_per_class": counts}

    def render(console: Console) -> None:
        console.print(f"wrote {len(table['rows'])} residuals of {', '.join(table['sets'])} to {TABLE}: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), soft_wrap=True)

    return payload, render
