"""Published training runs (rows of calibration_runs.json and files like it) -> what the planner
prices, and the planner's error against each (`wanka plan validate`, docs/plan.md "Validate").

A row carries `architecture`, `hardware`, `parallelism` and `result` (null = unknown). Only what a
row states is used; where a field the planner needs is missing, a stated default is taken and the
row's `assumed` list says so. Framework facts that change mechanisms (framework_options):
  * Megatron-LM up to 2022 had no FlashAttention (published 2022, in Megatron from 2023) and no TP
    communication overlap; SC'21 ran Megatron's non-overlapped 'local' DDP above 18B.
  * Megatron-Core / NeMo / Megatron-Bridge with --tp-comm-overlap: half the TP traffic hidden (an
    assumption; Transformer Engine userbuffers overlap it with the GEMMs).
  * DeepSpeed ZeRO-3 as of 2021 (SC'21 Table 2): per-weight gathers one submodule ahead, gradient
    reduce-scatters on the compute stream, and collectives at about one NIC per GPU (a hypothesis:
    docs/plan.md "ZeRO-3").
  * MegaScale (NSDI'24 s.3.2) fuses TP communication into the GEMMs: 80% of it hidden (assumption).
  * Megatron-LM dated before --overlap-grad-reduce (2023-08-16): 'local' DDP after the backward,
    no FlashAttention unless --use-flash-attn; Llama 3 (NCCLX): all-gather context parallelism.
  * DualPipe (DeepSeek-V3): Options.pipeline="dualpipe", 20 of 132 SMs for communication.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.exposure import Options
from wanka.workload.activations import RECOMPUTE_MODULES
from wanka.workload.spec import parse_model_spec

# accelerator text -> catalog name, most specific first
GPU_NAMES = [("gb200", "gb200"), ("b200", "b200"), ("h200", "h200"), ("h800", "h800"), ("h20", "h20"),
             ("mi300x", "mi300x"), ("mi325x", "mi325x"), ("mi350x", "mi350x"), ("mi355x", "mi355x"),
             ("gaudi2", "gaudi2"), ("gaudi 2", "gaudi2"), ("gaudi3", "gaudi3"), ("gaudi 3", "gaudi3"), ("a100 40gb", "a100-40gb"), ("a100-40gb", "a100-40gb"),
             ("a100-sxm4-40gb", "a100-40gb"), ("a100", "a100-80gb"), ("h100", "h100-sxm"),
             ("910c", "ascend-910c"), ("910b", "ascend-910b")]


BUILT_IN = Path(__file__).parent / "published_runs"  # name.json: runs shipped with wanka (name.md: sources)


def built_in_runs() -> list[str]:
    return sorted(p.stem for p in BUILT_IN.glob("*.json"))


def load_rows(path: str | Path) -> list[dict]:
    """The rows of a published-runs JSON file (a list, or {"runs": [...]}), or of a built-in set by
    name (`dgxc`: NVIDIA DGX Cloud benchmarking recipes, see published_runs/dgxc.md)."""
    p = Path(path)
    if not p.exists() and (BUILT_IN / f"{path}.json").exists():
        p = BUILT_IN / f"{path}.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError("--runs", f"an existing JSON file of published runs or a built-in set "
                        f"({', '.join(built_in_runs())})", str(path)) from None
    except OSError as exc:  # a directory, no permission
        raise SpecError("--runs", "a readable JSON file", f"{path} ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError("--runs", "a JSON list of runs", f"unreadable JSON ({exc})", source=str(path)) from None
    except RecursionError:  # json recurses once per nesting level; run files nest 3 levels
        raise SpecError("--runs", "a JSON list of runs", "JSON nested too deeply", source=str(path)) from None
    rows = data.get("runs") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecError("--runs", "a JSON list of run objects (or {\"runs\": [...]})", type(rows).__name__, source=str(path))
    return rows


def _sec(row: dict, key: str) -> dict:
    v = row.get(key)
    return v if isinstance(v, dict) else {}


def catalog_gpu(text: str) -> str:
    low = (text or "").lower()
    for key, name in GPU_NAMES:
        if key in low:
            return name
    raise SpecError("hardware.gpu", "an accelerator in the hardware catalog (wanka cluster list)", text)


def row_cluster(row: dict, assumed: list[str] | None = None) -> Cluster:
    """The run's cluster: its GPUs, NVLink domain and per-GPU scale-out bandwidth on a fat-tree.
    A domain that does not divide the GPU count (128 GPUs of GB200 NVL72 racks) becomes the largest
    divisor of the count in whole nodes below it (64: a job takes 16 of a rack's 18 trays)."""
    hw = _sec(row, "hardware")
    # a part the catalog lacks, stated by the row itself (`hardware.part`: an inline GPU with its
    # sources, e.g. torchtitan's 500 W HBM2e H100s); its name keeps the catalog family prefix
    part = hw.get("part") if isinstance(hw.get("part"), dict) else None
    gpu = part["name"] if part else catalog_gpu(hw.get("gpu"))
    gpus = hw.get("gpu_count")
    per_node = 4 if gpu == "gb200" else 8  # a GB200 compute tray holds 4 GPUs (NVL72: 18 trays)
    domain = hw.get("nvlink_domain_size") or 8
    if isinstance(gpus, int) and gpus > 0 and gpus % domain:
        fit = max((d for d in range(per_node, domain + 1, per_node) if gpus % d == 0), default=per_node)
        if assumed is not None:
            assumed.append(f"NVLink domain {fit} of {domain} (the domain does not divide {gpus} GPUs)")
        domain = fit
    bw = hw.get("inter_node_bw_per_gpu_Gbps")
    if bw is None and assumed is not None:
        assumed.append("400 Gb/s per GPU scale-out")
    spec = {"name": str(row.get("id", "run")), "gpu": part or gpu, "gpus": gpus, "gpus_per_node": min(per_node, domain),
            "scale_up": {"domain": domain}, "scale_out": {"bandwidth_Gbps": bw or 400, "topology": "fat-tree"}}
    return Cluster(parse_cluster_spec(spec, str(row.get("id"))))


def _activation(text: str | None) -> str:
    t = (text or "gelu").lower()
    return "swiglu" if any(k in t for k in ("swiglu", "silu", "geglu")) else "gelu"  # squared-ReLU: 2 matrices


def row_model(row: dict):
    a = _sec(row, "architecture")
    act = _activation(a.get("ffn_activation"))
    spec = {"name": str(row.get("id", "run")), "layers": a.get("layers"), "hidden": a.get("hidden_size"),
            "heads": a.get("attention_heads"), "kv_heads": a.get("kv_heads") or a.get("attention_heads"),
            "head_dim": a.get("head_dim"), "ffn_hidden": a.get("ffn_hidden_size") or 4 * (a.get("hidden_size") or 0),
            "vocab": a.get("vocab_size"), "seq_len": a.get("seq_len"), "activation": act,
            "norm": "rmsnorm" if act == "swiglu" else "layernorm", "sliding_window": a.get("sliding_window")}
    if a.get("num_experts"):
        spec["moe"] = {"experts": a["num_experts"], "top_k": a.get("top_k") or 1,
                       "ffn_hidden": a.get("moe_ffn_hidden_size") or spec["ffn_hidden"],
                       "shared_experts": a.get("shared_experts") or 0, "dense_layers": a.get("num_dense_layers") or 0}
    if "mla" in str(a.get("attention_type") or "").lower():
        spec["mla"] = _mla_from_preset(a)
    return parse_model_spec({k: v for k, v in spec.items() if v is not None}, str(row.get("id")))


def _mla_from_preset(a: dict) -> dict:
    """MLA ranks are not row fields: take them from a preset of the same shape (DeepSeek-V3)."""
    from wanka.workload import load_model

    m = load_model("deepseek-v3")
    if a.get("hidden_size") == m.hidden and m.mla is not None:
        return m.mla.model_dump()
    raise SpecError("architecture.attention_type", "MLA only for DeepSeek-V3's shape (ranks are not row fields)",
                    a.get("attention_type"))


def _recompute(text: str | None) -> str:
    t = (text or "").lower()
    if "selective" in t:
        return "selective"
    if t.startswith("full") or "uniform" in t or ("checkpoint" in t and not t.startswith(("no", "none"))):
        return "full"  # Megatron --checkpoint-activations / --recompute-granularity full
    return "none"


def zero_stage(text: str | None) -> int:
    """ZeRO stage from free text: 'ZeRO-3', 'ZeRO stage 1', 'FSDP (full shard)', 'HSDP',
    'distributed optimizer' (= ZeRO-1, Megatron), 'FSDP SHARD_GRAD_OP' / 'ZeRO-2'."""
    t = (text or "").lower()
    m = re.search(r"zero[\s_-]*(?:stage[\s_-]*)?([0-3])", t)
    if m:
        return int(m.group(1))
    if "shard_grad_op" in t or "reshard_after_forward=false" in t:
        return 2
    if "fsdp" in t or "hsdp" in t or "full shard" in t or "hybrid_shard" in t:
        return 3
    if "distributed optimizer" in t or "optimizer sharding" in t:
        return 1
    return 0


def _precision(text: str | None) -> str:
    t = (text or "").lower()
    return "fp8" if "fp8" in t else ("fp16" if "fp16" in t else "bf16")


def _year(p: dict) -> int | None:
    y = re.search(r"(20\d\d)", p.get("framework") or "")
    return int(y.group(1)) if y else None


def row_layout(row: dict) -> tuple[Layout, list[str]]:
    """The row's layout and the defaults it needed (mbs, dp, sequence parallelism)."""
    p, a, hw = _sec(row, "parallelism"), _sec(row, "architecture"), _sec(row, "hardware")
    assumed = []
    if p.get("tp") is None or p.get("pp") is None:
        raise SpecError("parallelism", "tp and pp of the run", f"tp={p.get('tp')}, pp={p.get('pp')}")
    tp, pp, cp = p["tp"], p["pp"], p.get("cp") or 1
    dp = p.get("dp") or (hw.get("gpu_count") or 0) // (tp * pp * cp)
    if not p.get("dp"):
        assumed.append("dp = GPUs / (tp pp cp)")
    mbs = p.get("micro_batch_size")
    if mbs is None:
        mbs = 1
        assumed.append("mbs 1")
    gbs = p.get("global_batch_size_seqs")
    if gbs is None and p.get("global_batch_tokens") and a.get("seq_len"):
        gbs = p["global_batch_tokens"] // a["seq_len"]
    if gbs is None and pp > 1:  # the batch sets the number of micro-batches, hence the bubble
        raise SpecError("parallelism.global_batch_size_seqs", "the run's global batch (with pp > 1 it sets the "
                        "pipeline bubble)", None)
    if gbs is None:
        gbs = dp * mbs
        assumed.append("gbs = dp x mbs")
    mcore = _megatron_core(p)
    sp = p.get("sequence_parallel")
    if sp is None:  # Megatron-Core recipes turn it on with TP; it did not exist before 2022
        sp = tp > 1 and mcore
        if tp > 1 and (_year(p) or 2023) >= 2022:
            assumed.append(f"sequence parallel {'on' if sp else 'off'}")
    zero_text = p.get("zero_or_fsdp")
    zero = zero_stage(zero_text)
    if zero_text is None and mcore and dp * cp > 1:  # NeMo / Megatron-Bridge default to the distributed optimizer
        zero = 1
        assumed.append("distributed optimizer (ZeRO-1)")
    ep = p.get("ep") or 1
    etp = p.get("etp") if ep > 1 and p.get("etp") is not None else None
    if ep > 1 and etp is None and (dp * cp) % ep and (tp * cp * dp) % ep == 0:
        etp = 1  # an EP group wider than dp*cp must span the TP ranks: experts not TP-split
        assumed.append("etp 1 (ep spans the TP ranks)")
    # "FSDP=128", "shard group 8" -- not "FSDP2" (PyTorch's FSDP version 2): a separator is required
    shard = re.search(r"(?:fsdp|dp_shard|shard group)(?:\s*[=:]\s*|\s+)(\d+)", (zero_text or "").lower())
    dp_shard = int(shard.group(1)) if zero == 3 and shard and dp % int(shard.group(1)) == 0 else None
    if dp_shard is not None and dp_shard >= dp:
        dp_shard = None
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, dp_shard=dp_shard,
                 vpp=p.get("virtual_pipeline_chunks_per_rank") or 1,
                 mbs=mbs, gbs=gbs, zero=zero, recompute=_recompute(p.get("recompute")),
                 precision=_precision(p.get("precision")), sp=bool(sp))
    return lay, assumed


def _megatron_core(p: dict) -> bool:
    """Megatron-Core and the frameworks built on it (NeMo 2.x, Megatron-Bridge)."""
    fw = (p.get("framework") or "").lower()
    return any(k in fw for k in ("core", "nemo", "bridge", "mcore"))


def framework_options(row: dict, lay: Layout | None = None) -> Options:
    """The run's framework profile (plan/frameworks.py) for its layout, then what the row itself
    states or what its year implies (TP overlap asked for, 'local' DDP, recompute modules, DualPipe,
    2021 DeepSpeed ZeRO-3)."""
    from wanka.plan.frameworks import before_overlap_grad_reduce, family_of, framework
    from wanka.plan.moe_cost import moe_execution_of_row

    p, a = _sec(row, "parallelism"), _sec(row, "architecture")
    fw = (p.get("framework") or "").lower()
    year = _year(p)
    old = year is not None and year <= 2022 and "core" not in fw
    family = family_of(p.get("framework"), p.get("zero_or_fsdp"))
    if family == "megatron-lm" and old:
        family = "megatron-lm-2021"  # no FlashAttention, no TP overlap up to 2022
    elif family == "megatron-lm" and before_overlap_grad_reduce(p.get("framework")):
        family = "megatron-lm-2023"  # 'local' DDP: gradients all-reduced after the backward
    opts = framework(family).options(lay) if family else Options()
    overlap = " ".join(str(p.get(k) or "") for k in ("comm_overlap", "framework")).lower()
    kw = {}
    if old:  # no FlashAttention and no TP overlap in Megatron-LM up to 2022
        kw.update(attention="unfused", tp_overlap=0.0)
    elif (p.get("comm_overlap") or "").lower().startswith("none"):  # off ('none (TP_COMM_OVERLAP=False)' names the flag)
        kw["tp_overlap"] = 0.0
    elif any(k in overlap for k in ("tp-comm-overlap", "tp_comm_overlap", "tp comm overlap")) and opts.tp_overlap == 0:
        kw["tp_overlap"] = 0.5  # Transformer Engine userbuffers; the fraction is an assumption (frameworks.py)
    if family == "megatron-lm-2023" and "use-flash-attn" in overlap:  # the opt-in flag (frameworks.py)
        kw["attention"] = "flash"
    if p2p := re.search(r"overlap_p2p_comm(?:\s*[:=]\s*(true|false))?", overlap):  # stated by the run's config
        kw["pp_p2p_overlap"] = p2p.group(1) != "false"  # Megatron-Core's overlap_p2p_comm (plan/interleaved.py)
    if (v := re.search(r"core[ _-]?r?0\.(\d+)", fw)) and int(v.group(1)) <= 8:  # before --align-param-gather:
        kw["align_param_gather"] = False  # r0.8's pre-hook chain (frameworks._ALIGN_AG)
    local_ddp = "'local' ddp above" in (p.get("zero_or_fsdp") or "").lower()
    if local_ddp and (a.get("total_params_B") or 0) > 18.5:  # SC'21 ran Megatron's non-overlapped 'local' DDP
        kw["dp_overlap"] = False
    rec = (p.get("recompute") or "").lower().split("(")[0]  # the module list, not the note in parentheses
    mods = tuple(m for m in RECOMPUTE_MODULES if m in rec)
    if mods:
        kw["recompute_modules"] = mods
    if isinstance(p.get("moe_capacity_factor"), (int, float)) and p["moe_capacity_factor"] > 0:
        kw["moe_capacity_factor"] = float(p["moe_capacity_factor"])  # token dropping, padded buffers
    if isinstance(p.get("dp_bucket_params"), (int, float)) and p["dp_bucket_params"] >= 1:
        kw["dp_bucket_params"] = float(p["dp_bucket_params"])  # the run's DDP bucket_size (parameters)
    kw.update(moe_execution_of_row(p))  # the script's MoE dispatcher and grouped GEMM (plan/moe_cost.py)
    if "eager" in fw and "compile" not in fw:  # no torch.compile: elementwise ops kernel by kernel
        kw["eager"] = True
    if "dualpipe" in (p.get("pipeline_schedule") or "").lower():
        kw.update(pipeline="dualpipe", comm_sm_fraction=20 / 132)
    if family in ("megatron-core", "megatron-lm", "megatron-lm-2021") and not any(  # Megatron-LM's own scripts:
            k in fw + overlap for k in ("nemo", "bridge", "mlperf", "cross-entropy-loss-fusion")):  # fusion opt-in
        kw["megatron_unfused_ce"] = True
    if zero_stage(p.get("zero_or_fsdp")) == 3 and "deepspeed" in fw and year is not None and year <= 2021:
        kw.update(dp_overlap=True, algorithm="flat-ring", zero3_unit="weight")  # overlap_comm: frameworks.py
    return dataclasses.replace(opts, **kw)


def measured_tokens_per_gpu(row: dict, lay: Layout | None = None) -> tuple[float | None, str]:
    r, hw, a = _sec(row, "result"), _sec(row, "hardware"), _sec(row, "architecture")
    gpus = hw.get("gpu_count")
    if r.get("tokens_per_sec_per_gpu"):
        return float(r["tokens_per_sec_per_gpu"]), "tokens_per_sec_per_gpu"
    if r.get("tokens_per_sec_total") and gpus:
        return r["tokens_per_sec_total"] / gpus, "tokens_per_sec_total"
    if r.get("iteration_time_s") and gpus and lay is not None and a.get("seq_len"):
        return lay.gbs * a["seq_len"] / r["iteration_time_s"] / gpus, "iteration_time_s"
    return None, "none"


@dataclass
class Check:
    id: str
    gpus: int | None = None
    layout: str = ""
    measured: float | None = None  # tokens/s per GPU
    predicted: float | None = None
    error: float | None = None  # predicted / measured - 1
    mfu_measured: float | None = None  # as the source counts it, % of the BF16 peak
    mfu_predicted: float | None = None
    hfu_measured: float | None = None  # % of the BF16 peak, recompute counted
    hfu_predicted: float | None = None
    memory_GiB: float | None = None
    fits: bool | None = None
    basis: str | None = None  # what the error compares: "tokens/s" (per GPU), else "MFU" or "HFU", or
    # "run-level" (a whole run's average: own median, not in the steady-state statistics)
    assumed: list[str] = field(default_factory=list)
    skipped: str | None = None
    mechanism: str | None = None  # uncertainty class (wanka.plan.uncertainty)
    group: str | None = None  # configuration: what leave-one-out leaves out together
    p10: float | None = None  # interval of the compared quantity (units of `measured`, or MFU/HFU %)
    p90: float | None = None
    covered: bool | None = None  # measured inside [p10, p90]
    family: str | None = None  # framework profile the row names (plan/frameworks.py family_of)
    # run-level rows: `predicted` = steady state x goodput (plan/run_level.py, reliability/goodput.py)
    predicted_steady_state: float | None = None
    goodput: float | None = None
    goodput_detail: dict | None = None


def check_row(row: dict) -> Check:
    """Price one published run and compare; never raises for a row the planner cannot take."""
    from wanka.plan.estimate import estimate
    from wanka.plan.frameworks import family_of
    from wanka.plan.run_level import row_goodput, run_level_reason, run_level_tokens_per_gpu

    p = _sec(row, "parallelism")
    c = Check(id=str(row.get("id", "?")), gpus=_sec(row, "hardware").get("gpu_count"),
              family=family_of(p.get("framework"), p.get("zero_or_fsdp")))
    try:
        model, cluster = row_model(row), row_cluster(row, c.assumed)
        lay, layout_assumed = row_layout(row)
        c.assumed += layout_assumed
        e_opts = framework_options(row, lay)
        e = estimate(model, cluster, lay, options=e_opts)
    except (SpecError, ValueError, TypeError, ZeroDivisionError) as exc:
        c.skipped = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return c
    c.layout, c.predicted = str(e.layout), e.tokens_per_s_per_gpu
    c.mfu_predicted, c.memory_GiB, c.fits = 100 * e.mfu, e.memory_GB_per_gpu, e.fits
    r, hw = _sec(row, "result"), _sec(row, "hardware")
    c.mfu_measured = _measured_mfu(r, hw)
    runlevel = run_level_reason(row)
    c.measured, _ = measured_tokens_per_gpu(row, e.layout)
    if runlevel:  # a whole run's average: steady state x the run's expected goodput (plan/run_level.py)
        c.measured = c.measured or run_level_tokens_per_gpu(row)
        if c.measured:
            g, why = row_goodput(model, cluster, _year(p))
            c.predicted_steady_state, c.goodput, c.goodput_detail = c.predicted, g.goodput, g.as_dict()
            c.predicted = c.predicted_steady_state * g.goodput
            c.basis, c.error = "run-level", c.predicted / c.measured - 1
            c.assumed += [runlevel, f"goodput {g.goodput:.1%}"]
            c.goodput_detail["inputs"] = why
        else:
            c.skipped = "run-level row without training tokens and GPU-hours (or days)"
    elif c.measured:
        c.error, c.basis = c.predicted / c.measured - 1, "tokens/s"
    elif c.mfu_measured:
        c.error, c.basis = c.mfu_predicted / c.mfu_measured - 1, "MFU"
    elif r.get("hfu_pct"):
        c.hfu_measured, c.hfu_predicted = r["hfu_pct"], 100 * e.hfu
        c.error, c.basis = c.hfu_predicted / c.hfu_measured - 1, "HFU"
    else:
        c.skipped = "no tokens/s, iteration time, MFU or HFU to compare with"
        return c
    from wanka.plan.uncertainty import judge

    pred, meas = {"MFU": (c.mfu_predicted, c.mfu_measured), "HFU": (c.hfu_predicted, c.hfu_measured)}.get(
        c.basis, (c.predicted, c.measured))
    judge(c, model, cluster, e.layout, e_opts, pred, meas)
    return c


def _measured_mfu(r: dict, hw: dict) -> float | None:
    """MFU in % of the BF16 dense peak, as the source counts model FLOPs (none when it counts HFU)."""
    counting = str(r.get("tflops_counting") or "").lower()
    mfu = r.get("mfu_pct")
    if mfu is None and r.get("tflops_per_gpu") and hw.get("peak_dense_tflops_bf16_fp16") \
            and "hfu" not in counting and "recompute" not in counting:
        mfu = 100 * r["tflops_per_gpu"] / hw["peak_dense_tflops_bf16_fp16"]
    if mfu and "fp8 peak" in counting:
        mfu *= 2  # NVIDIA's FP8 rows count against the FP8 peak (2x BF16 on Hopper/Blackwell)
    return mfu


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values`, linear between order statistics (numpy's default)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def summary(checks: list[Check]) -> dict:
    """Error statistics over steady-state comparisons (tokens/s, MFU, HFU), overall and per
    framework family; run-level rows (whole-run averages, priced as steady state x goodput) have
    their own `run_level` median and stay out of the steady-state statistics."""
    from wanka.plan.uncertainty import coverage

    compared = [c for c in checks if c.error is not None and not c.skipped and c.basis != "run-level"]
    errs = [abs(c.error) for c in compared]
    families: dict[str, list[float]] = {}
    for c in compared:
        families.setdefault(c.family or "unrecognised", []).append(abs(c.error))
    run = [abs(c.error) for c in checks if c.error is not None and not c.skipped and c.basis == "run-level"]
    return {"rows": len(checks), "compared": len(errs), "skipped": sum(1 for c in checks if c.skipped),
            "run_level": {"compared": len(run), "median_abs_error": statistics.median(run) if run else None},
            "median_abs_error": statistics.median(errs) if errs else None,
            "p90_abs_error": quantile(errs, 0.9) if errs else None, "max_abs_error": max(errs) if errs else None,
            "p10_p90_coverage": coverage(checks),
            "by_family": {f: {"compared": len(e), "median_abs_error": statistics.median(e),
                              "p90_abs_error": quantile(e, 0.9)} for f, e in sorted(families.items())}}
