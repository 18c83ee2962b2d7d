"""Run-level rows: a published figure that is a whole training run's average (training tokens over
GPU-hours or training days), priced as steady state x the run's expected goodput (docs/plan.md
"Run-level rows").

Recognition (`run_level_reason`), any of:
  * the id ends in `_runlevel`;
  * totals only: `result` has training_tokens with gpu_hours or training_days and none of
    iteration_time_s, tokens_per_sec_per_gpu, tokens_per_sec_total, tflops_per_gpu, mfu_pct,
    hfu_pct (a step-level measurement) -- the measurement can only come from the whole run;
  * the row's notes or result text say so ("run-level", "whole run", "run average", "averaged over
    the (whole|entire|full) run", "restarts included", "including restarts/failures", "tokens /
    GPU-hours" -- a figure derived from the totals).
SC'21 Table 2's training days are projections from a measured iteration time: they carry
iteration_time_s, so they stay steady-state rows.

Goodput (`row_goodput`): wanka.reliability.goodput's closed form (Daly 2006) for the job's GPUs,
with what the project already sources:
  * failures: runs dated up to 2022 (the row's framework year) -> `opt-175b`, the 2021-22 A100 run
    that restarted by hand (OPT-175B s.2.4-2.5: 35 manual of ~105 restarts in 2 months, 14.1
    failures per 1000 node-days); later A100 runs -> `rsc1` (Meta RSC-1, 16k A100, 6.50 per 1000
    node-days, Kokolis et al. 2024); every other accelerator -> `llama3-h100` (Llama 3 s.3.3.4: 419
    unexpected interruptions in 54 days on 16,384 H100). Taxonomies in reliability/taxonomy.yaml.
  * checkpoint stall = restore time = the model's training state / storage bandwidth. State: 14
    bytes per parameter, 16-bit weights 2 + fp32 master weights and Adam m, v 12 (gradients are
    not saved; plan/memory.py's table; BLOOM's full checkpoint, 2.3 TB for 176B = 13.1, agrees).
    Bandwidth: up to 2022 20 Gb/s, MT-NLG's state to remote storage (Gemini, SOSP'23, 42 min) [Q];
    later 2 TB/s, Llama 3's Tectonic sustained write (s.3.3.1) [P]. Synchronous writes assumed.
  * detection, restart and manual-diagnosis seconds: wanka.reliability.goodput.
"""

from __future__ import annotations

import re

from wanka.plan.row_measured import amount
from wanka.plan.row_text import section
from wanka.reliability.failures import load_failure_model
from wanka.reliability.goodput import RunGoodput, run_goodput
from wanka.workload.params import param_counts

CHECKPOINT_BYTES_PER_PARAM = 14.0  # 16-bit weights 2 + fp32 master, Adam m, v 12 (plan/memory.py)
STORAGE_GBPS_2022 = 20 / 8  # 20 Gb/s: MT-NLG to remote storage, Gemini SOSP'23 [Q]
STORAGE_GBPS_LATER = 2000.0  # 2 TB/s: Llama 3 Tectonic sustained (arXiv 2407.21783 s.3.3.1) [P]
STEP_LEVEL = ("iteration_time_s", "tokens_per_sec_per_gpu", "tokens_per_sec_total", "tflops_per_gpu", "mfu_pct",
              "hfu_pct")
_SAYS_RUN_LEVEL = re.compile(
    r"run[- ]level|whole[- ](?:training[- ])?run|run[- ]average|entire training run|"
    r"averaged? over the (?:whole|entire|full) (?:training )?run|restarts included|"
    r"including (?:the )?(?:restarts|failures|downtime)|"
    r"tokens\s*/\s*\(?(?:the\s+)?(?:total\s+)?(?:gpu[- _]?hours|gpu[- ]?days)", re.IGNORECASE)


def run_level_reason(row: dict) -> str | None:
    """Why this row is a whole run's average (recorded in its `assumed` list), or None."""
    r = section(row, "result")
    if str(row.get("id", "")).endswith("_runlevel"):
        return "run-level (id ends in _runlevel)"
    if r.get("training_tokens") and (r.get("gpu_hours") or r.get("training_days")) \
            and not any(r.get(k) for k in STEP_LEVEL):
        return "run-level (whole-run totals only)"
    text = " ".join([str(row.get("notes") or "")] + [str(v) for v in r.values() if isinstance(v, str)])
    if _SAYS_RUN_LEVEL.search(text):
        return "run-level (its notes say so)"
    return None


def run_level_tokens_per_gpu(row: dict) -> float | None:
    """A whole run's training tokens / GPU-seconds: from GPU-hours, or days x GPUs."""
    r, hw = section(row, "result"), section(row, "hardware")
    tokens = amount(r, "training_tokens", "result")
    if not tokens:
        return None
    gpu_hours = amount(r, "gpu_hours", "result")
    days, gpus = amount(r, "training_days", "result"), amount(hw, "gpu_count", "hardware")
    if gpu_hours:
        return tokens / (gpu_hours * 3600)
    return tokens / (days * 86400 * gpus) if days and gpus else None


def failure_model_for(gpu: str, year: int | None) -> str:
    """The taxonomy model for the row's era and accelerator (module docstring)."""
    if year is not None and year <= 2022:
        return "opt-175b"
    return "rsc1" if gpu.startswith("a100") else "llama3-h100"


def row_goodput(model, cluster, year: int | None) -> tuple[RunGoodput, str]:
    """Expected goodput of the row's job and a one-line account of the inputs it came from."""
    fm = failure_model_for(cluster.gpu.name, year)
    state_GB = CHECKPOINT_BYTES_PER_PARAM * param_counts(model).total / 1e9
    bw = STORAGE_GBPS_2022 if year is not None and year <= 2022 else STORAGE_GBPS_LATER
    write_s = state_GB / bw
    g = run_goodput(load_failure_model(fm), cluster.gpus, cluster.gpus_per_node, checkpoint_s=write_s,
                    restore_s=write_s)
    why = (f"failures {fm} (MTBF {g.mtbf_h:.1f} h), checkpoint {state_GB:,.0f} GB at {bw:g} GB/s = {write_s:.0f} s "
           f"every {g.interval_s / 60:.0f} min (Daly), {g.recovery_s:.0f} s per failure")
    return g, why
