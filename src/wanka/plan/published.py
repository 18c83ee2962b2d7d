"""Published training runs (rows of calibration_runs.json and files like it) -> what the planner
prices, and the planner's error against each (`wanka plan validate`, docs/plan.md "Validate").

A row carries `architecture`, `hardware`, `parallelism` and `result` (null = unknown). Only what a
row states is used; where a field the planner needs is missing, a stated default is taken and the
row's `assumed` list says so; free text ("FULL_SHARD", "no recompute", "A100-SXM4-40GB") is read by
plan/row_text.py, measured MFU/HFU brought to the planner's FLOP count and peak by plan/row_measured.py.
Framework facts that change mechanisms (framework_options):
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
from pathlib import Path

from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.exposure import Options
from wanka.plan.row_hardware import row_cluster
from wanka.plan.row_text import (count, flag, mentions, offloaded, precision_of, recompute_of, section, text_of,
                                 row_seq_len, row_year, tp_overlap_named, unstated_zero, words,
                                 zero_stage)
from wanka.workload.activations import RECOMPUTE_MODULES
from wanka.workload.spec import parse_model_spec

__all__ = ["BUILT_IN", "built_in_runs", "load_rows", "row_model", "row_cluster", "row_layout", "framework_options"]

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


def _activation(text: str | None) -> str:
    t = words(text) or "gelu"  # gated units (SwiGLU, GeGLU, ReGLU, "gated GELU", SiLU/Swish-gated): 3 matrices
    return "swiglu" if re.search(r"glu\b|gated|silu|swish", t) else "gelu"  # GELU, (squared-)ReLU: 2 matrices


def row_model(row: dict, assumed: list[str] | None = None):
    a = section(row, "architecture")
    act = _activation(a.get("ffn_activation"))
    hidden = count(a, "hidden_size", "architecture")
    if a.get("ffn_hidden_size") is None and assumed is not None:
        assumed.append("ffn_hidden_size 4 x hidden (not stated)")
    spec = {"name": str(row.get("id", "run")), "layers": a.get("layers"), "hidden": hidden,
            "heads": a.get("attention_heads"), "kv_heads": a.get("kv_heads") or a.get("attention_heads"),
            "head_dim": a.get("head_dim"), "ffn_hidden": a.get("ffn_hidden_size") or 4 * (hidden or 0),
            "vocab": a.get("vocab_size"), "seq_len": row_seq_len(row), "activation": act,
            "norm": "rmsnorm" if act == "swiglu" else "layernorm", "sliding_window": a.get("sliding_window"),
            "full_attention_every": a.get("full_attention_every"),
            "qk_norm": flag(a.get("qk_layernorm"), "architecture.qk_layernorm"),
            "tied_embeddings": flag(a.get("tied_embeddings"), "architecture.tied_embeddings")}  # one matrix in and out
    if "moe" in words(row.get("model_kind")) and not a.get("num_experts"):
        raise SpecError("architecture.num_experts", "the expert count of a run whose model_kind is MoE", None)
    if a.get("num_experts"):
        unstated = [k for k in ("top_k", "moe_ffn_hidden_size") if a.get(k) is None]
        if unstated and assumed is not None:
            assumed.append(f"{' and '.join(unstated)} not stated: top-1 routing / the dense FFN width")
        spec["moe"] = {"experts": a["num_experts"], "top_k": a.get("top_k") or 1,
                       "ffn_hidden": a.get("moe_ffn_hidden_size") or spec["ffn_hidden"],
                       "shared_experts": a.get("shared_experts") or 0, "dense_layers": a.get("num_dense_layers") or 0,
                       "expert_bias": bool(flag(a.get("moe_expert_bias"), "architecture.moe_expert_bias")),
                       "activation_clamp": a.get("moe_activation_clamp")}
    if "mla" in text_of(a.get("attention_type")):
        spec["mla"] = _mla_from_preset(a)
    try:
        return parse_model_spec({k: v for k, v in spec.items() if v is not None}, str(row.get("id")))
    except SpecError as exc:  # name the row's field, not the model spec's
        head = exc.field.split(".")[0]
        raise SpecError(f"architecture.{_ROW_FIELD.get(head, head)}", exc.expected, exc.got) from None


# model spec field -> the published row's architecture field
_ROW_FIELD = {"hidden": "hidden_size", "heads": "attention_heads", "vocab": "vocab_size", "ffn_hidden": "ffn_hidden_size",
              "activation": "ffn_activation", "moe": "num_experts"}


def _mla_from_preset(a: dict) -> dict:
    """MLA ranks are not row fields: take them from a preset of the same shape (DeepSeek-V3)."""
    from wanka.workload import load_model

    m = load_model("deepseek-v3")
    if a.get("hidden_size") == m.hidden and m.mla is not None:
        return m.mla.model_dump()
    raise SpecError("architecture.attention_type", "MLA only for DeepSeek-V3's shape (ranks are not row fields)",
                    a.get("attention_type"))


def row_layout(row: dict) -> tuple[Layout, list[str]]:
    """The row's layout and the defaults it needed (mbs, dp, sequence parallelism)."""
    p, hw = section(row, "parallelism"), section(row, "hardware")
    assumed = []
    degrees = {k: count(p, k, "parallelism") for k in ("tp", "pp", "cp", "dp")}
    gpus = count(hw, "gpu_count", "hardware")
    missing = [k for k in ("tp", "pp") if degrees[k] is None]
    if len(missing) == 1 and gpus and degrees["dp"]:  # the one degree the GPU count leaves
        k = missing[0]
        rest = math.prod(v or 1 for n, v in degrees.items() if n != k)
        if gpus % rest:
            raise SpecError(f"parallelism.{k}", f"a degree dividing {gpus} GPUs by the others ({rest})", None)
        degrees[k] = gpus // rest
        assumed.append(f"{k} = GPUs / (the other degrees)")
    elif missing:
        raise SpecError("parallelism", "tp and pp of the run", f"tp={p.get('tp')}, pp={p.get('pp')}")
    tp, pp, cp = degrees["tp"], degrees["pp"], degrees["cp"] or 1
    dp = degrees["dp"] or (gpus or 0) // (tp * pp * cp)
    if not degrees["dp"]:
        assumed.append("dp = GPUs / (tp pp cp)")
    ep_stated = count(p, "ep", "parallelism") or 1
    if gpus and tp * pp * cp * dp != gpus:  # Megatron's world = tp pp cp dp, experts inside dp
        if tp * pp * cp * dp * ep_stated == gpus:  # dp counted without the expert ranks (DeepSpeed-MoE style)
            dp *= ep_stated
            assumed.append(f"dp = {dp}: the stated dp x ep (the row counts expert ranks outside dp)")
        elif gpus % (tp * pp * cp) == 0:
            assumed.append(f"dp = {gpus // (tp * pp * cp)} from the GPU count (the stated dp {dp} does not make {gpus})")
            dp = gpus // (tp * pp * cp)
        else:
            raise SpecError("parallelism.dp", f"tp x pp x cp x dp = the GPU count {gpus}", f"{tp}x{pp}x{cp}x{dp}")
    mbs = count(p, "micro_batch_size", "parallelism")
    if mbs is None:
        mbs = 1
        assumed.append("mbs 1")
    gbs, seq = count(p, "global_batch_size_seqs", "parallelism"), row_seq_len(row)
    tokens, accum = count(p, "global_batch_tokens", "parallelism"), count(p, "grad_accum_steps", "parallelism")
    if gbs is None and tokens and seq:
        gbs = tokens // seq
    if gbs is None and accum:
        gbs = dp * mbs * accum
        assumed.append("gbs = dp x mbs x grad_accum_steps")
    if gbs is None and pp > 1:  # the batch sets the number of micro-batches, hence the bubble
        raise SpecError("parallelism.global_batch_size_seqs", "the run's global batch (with pp > 1 it sets the "
                        "pipeline bubble)", None)
    if gbs is None:
        gbs = dp * mbs
        assumed.append("gbs = dp x mbs")
    mcore = _megatron_core(p)
    sp = flag(p.get("sequence_parallel"), "parallelism.sequence_parallel")
    if sp is None:  # Megatron-Core recipes turn it on with TP; it did not exist before 2022. torchtitan's
        # apply_tp always shards the norms' sequence (SequenceParallel, parallelize_llama.py); MegaScale
        # fuses the TP/SP all-gather/reduce-scatter into the GEMMs (NSDI'24 s.3.2)
        from wanka.plan.frameworks import family_of

        sp = tp > 1 and (mcore or family_of(p.get("framework")) in ("torchtitan", "megascale"))
        if tp > 1 and (row_year(row) or 2023) >= 2022:
            assumed.append(f"sequence parallel {'on' if sp else 'off'}")
    zero_text = p.get("zero_or_fsdp")
    if offloaded(zero_text):
        raise SpecError("parallelism.zero_or_fsdp", "no CPU/NVMe offload (offloaded states are not priced)", zero_text)
    zero = zero_stage(zero_text)
    if zero_text is None:
        zero = unstated_zero(p, mcore and dp * cp > 1, assumed)
    ep = count(p, "ep", "parallelism") or 1
    etp = count(p, "etp", "parallelism") if ep > 1 else None
    if ep > 1 and etp is None and (dp * cp) % ep and (tp * cp * dp) % ep == 0:
        etp = 1  # an EP group wider than dp*cp must span the TP ranks: experts not TP-split
        assumed.append("etp 1 (ep spans the TP ranks)")
    # "FSDP=128", "shard group 8" -- not "FSDP2" (PyTorch's FSDP version 2): a separator is required
    # MaxText's "ici_fsdp_parallelism=8" too
    shard = re.search(r"(?:fsdp(?:_parallelism)?|dp_shard|shard group)(?:\s*[=:]\s*|\s+)(\d+)", text_of(zero_text))
    dp_shard = int(shard.group(1)) if zero == 3 and shard and dp % int(shard.group(1)) == 0 else None
    if dp_shard is not None and dp_shard >= dp:
        dp_shard = None
    vpp = count(p, "virtual_pipeline_chunks_per_rank", "parallelism")
    if vpp is None and pp > 1 and mentions(words(p.get("pipeline_schedule")), r"\binterleav"):
        assumed.append("vpp 1 (an interleaved schedule named without its chunk count)")
    recompute, stated = recompute_of(p.get("recompute"))
    if not stated:
        assumed.append("recompute none (not stated)")
    precision, stated = precision_of(p.get("precision"))
    if not stated:
        assumed.append("BF16 (precision not stated)")
    lay = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, dp_shard=dp_shard, vpp=vpp or 1,
                 mbs=mbs, gbs=gbs, zero=zero, recompute=recompute, precision=precision, sp=bool(sp))
    return lay, assumed


# A CUDA stack whose framework text names FlashAttention-2 or PyTorch's scaled_dot_product_attention runs
# FA2's kernels: SDPA's flash backend is FlashAttention-2 from PyTorch 2.2 (the torchtitan profile's source,
# frameworks.py); e.g. IBM fms-fsdp's README "SDPA implementation of Flash attention v2" (papers.md). Gaudi's
# fused SDPA is Habana's own kernel (megatron-deepspeed-habana keeps its profile's attention)
FA2_NAMED = re.compile(r"\bsdpa\b|\bflash ?attention ?(?:v ?)?2\b|\bflash ?attn ?2\b|\bfa2\b")
# A row naming a Hopper-class fused attention (FlashAttention-3, cuDNN / Transformer Engine fused attention): the
# architecture's best rate ("flash"), whatever its profile's default (frameworks._PT_FA2)
FA3_NAMED = re.compile(r"\bflash ?attention ?(?:v ?)?3\b|\bflash ?attn ?3\b|\bfa3\b|\bcudnn (?:fused )?attention\b")

# A row stating the dtype its data-parallel gradients are reduced in (PyTorch FSDP's
# MixedPrecision(reduce_dtype=...), e.g. fms-fsdp's bfSixteen policy, fms_fsdp/policies/mixed_precision.py
# @3b1ce15): the reduce-scatter / all-reduce moves that many bytes per element (Options.grad_bytes)
REDUCE_DTYPE = re.compile(r"\breduce dtype\s*[:=]?\s*(?:torch\.)?(bf16|bfloat16|fp16|float16|fp32|float32)\b")


def _megatron_core(p: dict) -> bool:
    """Megatron-Core and the frameworks built on it (NeMo 2.x, Megatron-Bridge, MindSpeed, NVIDIA's MLPerf)."""
    from wanka.plan.frameworks import family_of

    return family_of(p.get("framework")) in ("megatron-core", "nemo-mlperf", "mindspeed")


def framework_options(row: dict, lay: Layout | None = None) -> Options:
    """The run's framework profile (plan/frameworks.py) for its layout, then what the row itself
    states or what its year implies (TP overlap asked for, 'local' DDP, recompute modules, DualPipe,
    2021 DeepSpeed ZeRO-3)."""
    from wanka.plan.frameworks import before_overlap_grad_reduce, family_of, framework
    from wanka.plan.mbridge_userbuffers import stated_tp_overlap
    from wanka.plan.hier_dispatch import flex_dispatch_of_row
    from wanka.plan.moe_cost import moe_execution_of_row

    p, a = section(row, "parallelism"), section(row, "architecture")
    fw = text_of(p.get("framework"))
    year = row_year(row)
    # <= 2022: no FlashAttention, no TP overlap -- a Megatron-Core text cannot be that old (Megatron-Core, 2023)
    old = year is not None and year <= 2022 and not re.search(r"megatron core|\bmcore\b|\bcore r?\d", words(fw))
    family = family_of(p.get("framework"), p.get("zero_or_fsdp"))
    if family == "megatron-lm" and old:
        family = "megatron-lm-2021"  # no FlashAttention, no TP overlap up to 2022
    elif family == "megatron-lm" and before_overlap_grad_reduce(p.get("framework")):
        family = "megatron-lm-2023"  # 'local' DDP: gradients all-reduced after the backward
    opts = framework(family).options(lay) if family else Options()
    overlap = " ".join(text_of(p.get(k)) for k in ("comm_overlap", "framework"))
    kw = {}
    if old:  # no FlashAttention and no TP overlap in Megatron-LM up to 2022
        kw.update(attention="unfused", tp_overlap=0.0)
    elif re.match(r"(?:none|no|off|disabled|false)\b", words(p.get("comm_overlap"))):  # the run's script turns its
        kw["tp_overlap"] = 0.0  # overlap off -- first: 'none (TP_COMM_OVERLAP=False)' names the flag it turns off
    elif tp_overlap_named(overlap) and opts.tp_overlap == 0:
        kw["tp_overlap"] = 0.5  # Transformer Engine userbuffers; the fraction is an assumption (frameworks.py)
    if (named := stated_tp_overlap(text_of(p.get("comm_overlap")))) is not None and kw.get("tp_overlap") != 0.0:
        kw["tp_overlap"] = named  # the row's named userbuffers configuration (plan/mbridge_userbuffers.py)
    if family == "megatron-lm-2023" and "use-flash-attn" in overlap:  # the opt-in flag (frameworks.py)
        kw["attention"] = "flash"
    if re.match(r"unfused\b", words(p.get("attention_kernel"))):  # the row names its attention kernel unfused
        kw["attention"] = "unfused"
    if family == "megatron-deepspeed-habana" and lay is not None and not lay.sequence_parallel:
        kw["tp_overlap"] = 0.0  # no --sequence-parallel: the fork's synchronous all-reduces (frameworks._HPU_NO_SP)
    if rd := REDUCE_DTYPE.search(words(p.get("zero_or_fsdp"))):  # the run's gradient-reduction dtype, stated
        kw["grad_bytes"] = 4 if rd.group(1) in ("fp32", "float32") else 2
    fa2 = FA2_NAMED.search(words(fw)) and family != "megatron-deepspeed-habana"
    if fa2 and kw.get("attention", opts.attention) == "flash":  # FlashAttention-2 or PyTorch's SDPA named
        kw["attention"] = "flash2"
    named = " ".join(words(p.get(k)) for k in ("framework", "attention_kernel"))
    if FA3_NAMED.search(named) and kw.get("attention", opts.attention) == "flash2":  # FA3 / cuDNN named
        kw["attention"] = "flash"
    if p2p := re.search(r"overlap_p2p_comm(?:\s*[:=]\s*(true|false))?", overlap):  # stated by the run's config
        kw["pp_p2p_overlap"] = p2p.group(1) != "false"  # Megatron-Core's overlap_p2p_comm (plan/interleaved.py)
    if (v := re.search(r"core[ _-]?r?0\.(\d+)", fw)) and int(v.group(1)) <= 8:  # before --align-param-gather:
        kw["align_param_gather"] = False  # r0.8's pre-hook chain (frameworks._ALIGN_AG)
    local_ddp = "'local' ddp above" in text_of(p.get("zero_or_fsdp"))
    if local_ddp and (a.get("total_params_B") or 0) > 18.5:  # SC'21 ran Megatron's non-overlapped 'local' DDP
        kw["dp_overlap"] = False
    rec = text_of(p.get("recompute")).split("(")[0]  # the module list, not the note in parentheses
    mods = tuple(m for m in RECOMPUTE_MODULES if m in rec)
    if mods:
        kw["recompute_modules"] = mods
    if isinstance(p.get("moe_capacity_factor"), (int, float)) and p["moe_capacity_factor"] > 0:
        kw["moe_capacity_factor"] = float(p["moe_capacity_factor"])  # token dropping, padded buffers
    if isinstance(p.get("dp_bucket_params"), (int, float)) and p["dp_bucket_params"] >= 1:
        kw["dp_bucket_params"] = float(p["dp_bucket_params"])  # the run's DDP bucket_size (parameters)
    kw.update(moe_execution_of_row(p))  # the script's MoE dispatcher and grouped GEMM (plan/moe_cost.py)
    kw.update(flex_dispatch_of_row(p))  # DeepEP/HybridEP: once per node, node-limited routing (plan/hier_dispatch.py)
    if flag(p.get("moe_fused_grouped_mlp"), "parallelism.moe_fused_grouped_mlp"):  # plan/expert_epilogue.py
        kw["moe_fused_expert_mlp"] = True
    if flag(p.get("moe_a2a_overlap"), "parallelism.moe_a2a_overlap"):  # plan/a2a_overlap.py
        kw["moe_a2a_overlap"] = True
        kw["moe_delay_wgrad"] = bool(flag(p.get("delay_wgrad_compute"), "parallelism.delay_wgrad_compute"))
    if flag(p.get("moe_shared_expert_overlap"), "parallelism.moe_shared_expert_overlap"):  # plan/moe_cost.py
        kw["moe_shared_expert_overlap"] = True  # the shared experts beside the dispatch/combine all-to-alls
    if flag(p.get("overlap_grad_reduce"), "parallelism.overlap_grad_reduce") is False:  # the run turned it off:
        # the gradient reduce-scatter after the backward; the parameter all-gather keeps its own setting
        kw.update(dp_overlap=False, param_gather_overlap=opts.param_gather_overlapped)
    if (sms := count(p, "moe_dispatcher_sms", "parallelism", minimum=0)) is not None:
        kw["moe_dispatcher_sms"] = sms  # the run's moe_{hybridep,deepep}_num_sms
    if isinstance(p.get("pp_layout"), str) and p["pp_layout"]:  # Megatron-Core layout (plan/pp_layout.py)
        kw["pp_layout"] = p["pp_layout"]
    if isinstance(p.get("mtp_layers"), int) and p["mtp_layers"] > 0:  # mtp_num_layers the run set
        kw["mtp_layers"] = p["mtp_layers"]
    if "eager" in fw and "compile" not in fw:  # no torch.compile: elementwise ops kernel by kernel
        kw["eager"] = True
    if "dualpipe" in text_of(p.get("pipeline_schedule")):
        kw.update(pipeline="dualpipe", comm_sm_fraction=20 / 132)
    if family in ("megatron-core", "megatron-lm", "megatron-lm-2021") and not any(  # Megatron-LM's own scripts:
            k in fw + overlap for k in ("nemo", "bridge", "mlperf", "cross-entropy-loss-fusion")):  # fusion opt-in
        kw["megatron_unfused_ce"] = True
    if zero_stage(p.get("zero_or_fsdp")) == 3 and "deepspeed" in fw and year is not None and year <= 2021:
        kw.update(dp_overlap=True, algorithm="flat-ring", zero3_unit="weight")  # overlap_comm: frameworks.py
    return dataclasses.replace(opts, **kw)
