"""What a published run measured, in the planner's units (`wanka plan validate`).

tokens/s per GPU (stated, from the total, or from the iteration time and batch), else MFU, else HFU,
else a whole run's average (training tokens over GPU-hours). MFU and HFU are brought to the
planner's convention before they are compared:
  * the peak: a row's MFU is against the peak it states (`hardware.peak_dense_tflops_bf16_fp16`,
    sometimes the 2:4-sparse figure, 2x); the planner's is the catalogue's dense BF16 peak, so the
    measured MFU is scaled by stated / catalogue peak (none stated, or one that is neither the part's
    dense nor its sparse figure within 15%: the catalogue's is assumed, and listed).
    NVIDIA's FP8 rows counting against the FP8 peak are doubled (2x BF16 on Hopper/Blackwell).
  * the FLOP count: the planner counts 6N + 12 L h s per token (PaLM appendix B; equal to Megatron's
    72 B s l h^2 (1 + s/6h + V/12lh) per step, Narayanan et al. SC'21 eq. 3 without recompute). A
    row stating causal attention counted at half, or 6N alone (Kaplan's C = 6ND), is converted
    by the ratio of the two counts for its model; recompute counted ("HFU", SC'21's eq. 3 with 96)
    compares with the planner's HFU instead.
"""

from __future__ import annotations

import re

from wanka.errors import SpecError
from wanka.plan.row_text import section, words


def amount(section: dict, key: str, where: str) -> float | None:
    """A positive number field (None when missing or null; numeric text taken)."""
    v = section.get(key)
    if v is None:
        return None
    if isinstance(v, str) and re.fullmatch(r"\s*\d[\d,_]*(?:\.\d+)?(?:e\d+)?\s*", v):
        v = float(re.sub(r"[\s,_]", "", v))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise SpecError(f"{where}.{key}", "a positive number", v)
    return float(v)


def counting_text(row: dict, r: dict) -> str:
    """How the row counts FLOPs: result.tflops_counting, else the row's flop_accounting."""
    return words(r.get("tflops_counting") or row.get("flop_accounting") or "")


def counts_recompute(counting: str) -> bool:
    """Whether the stated TFLOP/s include recomputed FLOPs (HFU): 'HFU', 'hardware FLOPs', 'with
    recompute', SC'21's eq. 3 -- unless recompute is excluded ('without recompute', 'no recompute')."""
    if re.search(r"\b(?:without|no|excluding|excludes|not counting|minus)\b(?:\s+\w+){0,2}\s+recomput", counting):
        return False
    return re.search(r"\bhfu\b|hardware flops|recomput|executed flops", counting) is not None


def flops_convention(counting: str) -> str:
    """'full' (6N + 12 L h s, the planner's), 'causal' (attention counted at half) or '6n' (no attention term)."""
    if re.search(r"causal|attention (?:flops )?(?:halved|counted (?:at|as) half)|half (?:of )?(?:the )?attention", counting):
        return "causal"
    if re.search(r"\b6 ?n ?d?\b", counting) and not re.search(r"12\s*[·*x×]?\s*l\b", counting):
        return "6n"
    return "full"


def to_planner_flops(mfu: float, convention: str, model, seq_len: int) -> float:
    """A measured MFU (or HFU) under `convention` re-expressed with the planner's FLOP count."""
    from wanka.workload.flops import attention_core_flops_per_token, model_flops_per_token

    full = model_flops_per_token(model, seq_len)
    attn = 3 * model.layers * attention_core_flops_per_token(model, seq_len)  # fwd + 2x bwd
    theirs = {"full": full, "causal": full - attn / 2, "6n": full - attn}[convention]
    return mfu * full / theirs


def measured_mfu(row: dict, catalogue_peak: float, assumed: list[str]) -> tuple[float | None, float | None]:
    """(MFU %, HFU %) against the catalogue's dense BF16 peak, in the row's FLOP convention (the
    caller converts that); None where the row gives neither."""
    r, hw = section(row, "result"), section(row, "hardware")
    counting = counting_text(row, r)
    stated_peak = amount(hw, "peak_dense_tflops_bf16_fp16", "hardware")
    tflops = amount(r, "tflops_per_gpu", "result")
    mfu, hfu = amount(r, "mfu_pct", "result"), amount(r, "hfu_pct", "result")
    scale = (stated_peak / catalogue_peak) if stated_peak else 1.0
    if not any(abs(scale - k) <= 0.15 * k for k in (1.0, 2.0)):  # dense, or the 2:4-sparse / FP8 figure
        if mfu or hfu:
            assumed.append(f"stated peak {stated_peak:g} is not the part's {catalogue_peak:g} TFLOP/s "
                           "(dense or sparse): MFU/HFU taken against the catalogue's")
        scale = 1.0
    elif stated_peak is None and (mfu or hfu):
        assumed.append("MFU/HFU against the catalogue's BF16 peak (the row states no peak)")
    # NVIDIA's FP8 rows count MFU against the FP8 peak (2x BF16 on Hopper/Blackwell) -- unless the
    # stated peak already is that figure
    if re.search(r"fp8\b(?:\s+\w+){0,2}\s+peak|peak(?:\s+\w+){0,2}\s+fp8\b", counting) and abs(scale - 1) <= 0.15:
        scale *= 2
    mfu, hfu = (mfu * scale if mfu else None), (hfu * scale if hfu else None)
    if tflops is not None:  # achieved TFLOP/s per GPU: against the catalogue peak directly, no peak to convert
        from_tflops = 100 * tflops / catalogue_peak
        if counts_recompute(counting):
            hfu = hfu or from_tflops
        else:
            mfu = mfu or from_tflops
    return mfu, hfu


def measured_tokens_per_gpu(row: dict, lay=None) -> tuple[float | None, str]:
    r, hw, a, p = section(row, "result"), section(row, "hardware"), section(row, "architecture"), section(row, "parallelism")
    gpus = amount(hw, "gpu_count", "hardware")
    per_gpu = amount(r, "tokens_per_sec_per_gpu", "result")
    if per_gpu:
        return per_gpu, "tokens_per_sec_per_gpu"
    total = amount(r, "tokens_per_sec_total", "result")
    if total and gpus:
        return total / gpus, "tokens_per_sec_total"
    step = amount(r, "iteration_time_s", "result")
    seq = a.get("seq_len") or p.get("seq_len")
    if step and gpus and lay is not None and seq:
        return lay.gbs * seq / step / gpus, "iteration_time_s"
    return None, "none"
