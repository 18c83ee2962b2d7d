"""Turn a row of shared/reference/calibration_runs.json into (model, cluster, layout, options).

Only facts stated in the row are used: architecture, hardware (GPU, NVLink domain, per-GPU network
bandwidth, GPU count) and parallelism fields. Framework facts that change mechanisms:
  * Megatron-LM 2021/2022 had no FlashAttention (published 2022, adopted by Megatron in 2023):
    attention="unfused"; no TP communication overlap.
  * SC'21 used Megatron's 'local' DDP (gradient all-reduce after the backward, not overlapped) for
    models above 18B, torch DDP (overlapped) below, as the row's zero_or_fsdp field says.
"""

from __future__ import annotations

import json
import re
import os
from pathlib import Path

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.layout import Layout
from wanka.plan import Options
from wanka.workload.spec import parse_model_spec

# ../shared sits beside the repository (CI clones it with a copy of shared/ next to it).
_SHARED = Path(os.environ.get("WANKA_SHARED", Path(__file__).resolve().parents[3] / "shared"))
ROWS_PATH = _SHARED / "reference" / "calibration_runs.json"
GPU_NAMES = [("a100 80gb", "a100-80gb"), ("a100 40gb", "a100-40gb"), ("h100", "h100-sxm"), ("h800", "h800"),
             ("h200", "h200"), ("b200", "b200")]


def load_rows() -> list[dict]:
    return json.loads(ROWS_PATH.read_text())


def catalog_gpu(text: str) -> str:
    low = text.lower()
    for key, name in GPU_NAMES:
        if key in low:
            return name
    raise KeyError(text)


def row_cluster(row: dict) -> Cluster:
    hw = row["hardware"]
    spec = {"name": row["id"], "gpu": catalog_gpu(hw["gpu"]), "gpus": hw["gpu_count"], "gpus_per_node": 8,
            "scale_up": {"domain": hw.get("nvlink_domain_size") or 8},
            "scale_out": {"bandwidth_Gbps": hw["inter_node_bw_per_gpu_Gbps"], "topology": "fat-tree"}}
    return Cluster(parse_cluster_spec(spec, row["id"]))


def row_model(row: dict):
    a = row["architecture"]
    gelu = (a.get("ffn_activation") or "GELU").upper().startswith("GELU")
    return parse_model_spec({
        "name": row["id"], "layers": a["layers"], "hidden": a["hidden_size"], "heads": a["attention_heads"],
        "kv_heads": a.get("kv_heads") or a["attention_heads"], "head_dim": a.get("head_dim"),
        "ffn_hidden": a.get("ffn_hidden_size") or 4 * a["hidden_size"], "vocab": a["vocab_size"],
        "seq_len": a["seq_len"], "activation": "gelu" if gelu else "swiglu",
        "norm": "layernorm" if gelu else "rmsnorm"}, row["id"])


def _recompute(text: str | None) -> str:
    t = (text or "").lower()
    return "full" if t.startswith("full") else ("selective" if t.startswith("selective") else "none")


def _zero(text: str | None) -> int:
    t = (text or "").lower()
    if "zero-3" in t or "fsdp" in t:
        return 3
    if "distributed optimizer" in t or "zero-1" in t:
        return 1
    return 0


def _precision(text: str | None) -> str:
    t = (text or "").lower()
    return "fp8" if "fp8" in t else ("fp16" if "fp16" in t else "bf16")


def row_layout(row: dict) -> Layout:
    p = row["parallelism"]
    return Layout(tp=p["tp"], pp=p["pp"], dp=p["dp"], cp=p.get("cp") or 1, ep=p.get("ep") or 1,
                  vpp=p.get("virtual_pipeline_chunks_per_rank") or 1, mbs=p["micro_batch_size"],
                  gbs=p["global_batch_size_seqs"], zero=_zero(p.get("zero_or_fsdp")),
                  recompute=_recompute(p.get("recompute")), precision=_precision(p.get("precision")),
                  sp=bool(p.get("sequence_parallel")))


def row_options(row: dict) -> Options:
    p = row["parallelism"]
    year = re.search(r"(20\d\d)", p.get("framework") or "")
    old = year is not None and int(year.group(1)) <= 2022
    local_ddp = "'local' ddp above" in (p.get("zero_or_fsdp") or "").lower()
    big = (row["architecture"].get("total_params_B") or 0) > 18.5
    return Options(attention="unfused" if old else "flash", tp_overlap=0.0 if old else 0.5,
                   dp_overlap=not (local_ddp and big))


def runnable(row: dict) -> bool:
    p = row["parallelism"]
    need = [p.get("tp"), p.get("pp"), p.get("dp"), p.get("micro_batch_size"), p.get("global_batch_size_seqs")]
    return row["result"].get("tokens_per_sec_per_gpu") is not None and all(v is not None for v in need)


def zero3_2021_options(row: dict) -> Options | None:
    """DeepSpeed ZeRO-3 rows of SC'21 Table 2 (DeepSpeed as of early 2021).

    Mechanisms from DeepSpeed's stage-3 code: every weight matrix is gathered when its submodule
    runs and only the next one is prefetched (zero3_unit="weight"); gradient reduce-scatters run on
    the compute stream (overlap_comm defaulted to false: zero3_grad_overlap=False). Megatron 2021
    had no FlashAttention. ONE HYPOTHESIS, not sourced: the collectives moved about one 200 Gb/s
    NIC per GPU (algorithm="flat-ring") -- the rows' step time is the same at 768 and 1,536 GPUs
    (175B) and at 1,120 and 2,240 (530B), a constant per-GPU volume at ~21-23 GB/s, where NCCL's
    topology-aware rings would reach ~8x that on DGX-A100. docs/plan.md discusses it.
    """
    if _zero(row["parallelism"].get("zero_or_fsdp")) != 3 or "deepspeed" not in (row["parallelism"].get("framework") or "").lower():
        return None
    return Options(attention="unfused", tp_overlap=0.0, dp_overlap=True, algorithm="flat-ring",
                   zero3_unit="weight", zero3_grad_overlap=False)
