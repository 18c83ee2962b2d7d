"""Free text and missing fields of a published run (`wanka plan validate --runs FILE`) -> the planner's settings.

Rows are written by people: "FULL_SHARD", "ZeRO stage-2", "no activation checkpointing",
"float16", "A100-SXM4-40GB". Each reader here normalises the text (case, `_`/`-` as spaces),
honours negations ("no FP8", "without recompute") and says what it could not read instead of
guessing: an accelerator the catalogue lacks is refused by name, an unstated setting comes back
with the assumption the row's `assumed` column lists. docs/plan.md "Reading published rows"
has the table of phrasings (tests/plan/test_plan_row_text.py).
"""

from __future__ import annotations

import math
import re

from wanka.errors import SpecError


def text_of(value) -> str:
    """A free-text field as lower-case text; None (or a missing field) is ''."""
    return "" if value is None else str(value).lower()


def words(value) -> str:
    """Lower-case text with `_`, `-`, `/` and runs of blanks as one space: 'FULL_SHARD' -> 'full shard'."""
    return re.sub(r"[\s_/-]+", " ", text_of(value)).strip()


# a negation in front of a term: "no FP8", "without recompute", "w/o checkpointing", "not using"
_NEG = r"(?:\bno|\bnot|\bwithout|\bw o|\bnon|\bdisabled?)\s+(?:\w+\s+){0,2}"
_OFF = re.compile(r"^(?:none|no|off|false|disabled?|n a|not used|0)\b")


def negated(text: str, term: str) -> bool:
    """Whether every mention of `term` in normalised `text` is negated ('no fp8', 'fp8 not used')."""
    hits = list(re.finditer(term, text))
    if not hits:
        return False
    return all(re.search(_NEG + r"$", text[:m.start()]) or re.match(r"\s*(?:off|disabled|not used|false|none)\b",
                                                                     text[m.end():]) for m in hits)


def mentions(text: str, term: str) -> bool:
    """`term` (a regex) appears in normalised `text` and is not negated."""
    return re.search(term, text) is not None and not negated(text, term)


def zero_stage(text) -> int:
    """ZeRO stage from free text: 'ZeRO-3', 'ZeRO stage 1', 'zero_stage: 2', 'FSDP (full shard)',
    'FULL_SHARD', 'HSDP', 'hybrid sharded data parallel', 'distributed optimizer' / 'optimizer state
    sharding' (= ZeRO-1, Megatron), 'SHARD_GRAD_OP' / 'reshard_after_forward=False' (= ZeRO-2),
    'ZeRO++' / 'MiCS' (ZeRO-3 variants). Nothing recognised: 0."""
    t = words(text)
    if _OFF.match(t):  # "none (no --use-distributed-optimizer)", "no ZeRO", "NO_SHARD"
        return 0
    m = re.search(r"\bzero(?: dp)?\s*(?:stage)?\s*[:=]?\s*([0-3])\b|\bzero([0-3])\b|^stage\s*[:=]?\s*([0-3])\b", t)
    if m:
        return int(next(g for g in m.groups() if g is not None))
    if re.search(r"shard grad op|reshard after forward\s*[:=]?\s*false|no reshard after forward", t):
        return 2
    if re.search(r"\b(?:fsdp2?|hsdp|mics)\b|full(?:y)? shard|hybrid shard|sharded data parallel|zero\+\+|zero infinity", t):
        return 3
    if mentions(t, r"distributed optimi[sz]er|optimi[sz]er (?:state )?(?:sharding|sharded|partitioning)"):
        return 1
    return 0


def offloaded(text) -> bool:
    """ZeRO-Offload / ZeRO-Infinity / FSDP CPU offload named (and not negated): not priced."""
    t = words(text)
    return mentions(t, r"\boffload(?:ed|ing)?\b|zero infinity|\bnvme\b")


# MaxText remat policies (MaxText/layers/decoders.py get_remat_policy): 'minimal' saves the weight
# GEMMs' outputs (jax checkpoint_dots_with_no_batch_dims) and recomputes attention's batched dots --
# Megatron's selective recompute; 'full' saves nothing (jax nothing_saveable).
def recompute_of(text) -> tuple[str, bool]:
    """'none' | 'selective' | 'full' from free text, and whether the text stated it (False: 'none' assumed)."""
    t = words(text)
    if not t or t in ("not stated", "unknown", "n a", "null", "?"):
        return "none", False
    if _OFF.match(t) or negated(t, r"recomput\w*|checkpoint\w*|remat\w*|rematerializ\w*"):
        return "none", True
    if re.search(r"\bselective\b|\bpartial\b|\bsac\b|remat policy\s*[:=]?\s*minimal\b", t):
        return "selective", True
    if re.search(r"^full|^uniform|\bfull\b|all layers|every layer|\bblock\b|\bcheckpoint|recomput|remat|^(?:yes|true|on|enabled?)\b",
                 t):
        return "full", True  # Megatron --checkpoint-activations / --recompute-granularity full
    return "none", False


def precision_of(text) -> tuple[str, bool]:
    """'fp8' | 'fp16' | 'bf16' from free text, and whether it was stated (False: BF16 assumed).
    A negated mention ('FP8 not used', 'no fp8') does not count. FP32/TF32 training is refused:
    the planner prices 16-bit and FP8 GEMMs only. MXFP8 (FP8 elements with one shared scale per 32 values,
    OCP Microscaling Formats spec v1.0 s.5) is FP8 GEMMs at the FP8 rate on Blackwell (Transformer Engine's
    MXFP8BlockScaling recipe); FP4 (NVFP4, MXFP4) training is refused like FP32."""
    t = words(text)
    if re.search(r"\b(?:nv|mx)?fp4\b", t):
        raise SpecError("parallelism.precision", "BF16, FP16 or FP8 training (FP4 GEMMs are not priced)", text)
    if mentions(t, r"\b(?:mx)?fp8\b|\bfloat8\b|\be4m3\b|\be5m2\b"):
        return "fp8", True
    if mentions(t, r"\bbf16\b|\bbfloat16\b|\bbf 16\b"):
        return "bf16", True
    if mentions(t, r"\bfp16\b|\bfloat16\b|\bhalf\b|\bfp 16\b"):
        return "fp16", True
    if re.search(r"\b(?:fp32|tf32|float32|single precision)\b", t):
        raise SpecError("parallelism.precision", "BF16, FP16 or FP8 training (FP32/TF32 GEMMs are not priced)", text)
    return "bf16", False


_YEAR = re.compile(r"(?<![\w.])(20[12]\d)(?![\d.])")


def year_of(text) -> int | None:
    """The year a framework text dates itself by ('Megatron-LM (2021)', 'torchtitan 2024-12'); a
    version like 'NeMo 24.12' or a hash digit run is not a year."""
    y = _YEAR.search(text_of(text))
    return int(y.group(1)) if y else None


# stacks that ran before 2023, so an undated text may name an old run: the paper's date decides; the
# others (Megatron-Core/NeMo, torchtitan, MaxText, MegaScale, Llama 3, MLPerf, MindSpeed) postdate 2022
_PRE_2023_FAMILIES = (None, "megatron-lm", "deepspeed", "megatron-deepspeed", "fsdp")


def row_year(row: dict) -> int | None:
    """The year a run is known to be no later than: its framework text's year, else the date of the
    arXiv paper that reports it (`source`/`source_url`: 'arXiv:2201.11990' is January 2022), else the
    latest year `source` names (only for stacks that ran before 2023). A paper's date bounds its runs from above, which is all the dated
    rules need (no FlashAttention or TP overlap up to 2022, 'local' DDP before 2023-08)."""
    from wanka.plan.frameworks import family_of

    p = row.get("parallelism") if isinstance(row.get("parallelism"), dict) else {}
    year = year_of(p.get("framework"))
    if year is not None or family_of(p.get("framework")) not in _PRE_2023_FAMILIES:
        return year
    src = " ".join(text_of(row.get(k)) for k in ("source", "source_url"))
    arxiv = re.search(r"arxiv[\s:./abs]*(\d\d)(\d\d)\.\d{4,5}", src)
    if arxiv and 1 <= int(arxiv.group(2)) <= 12:
        return 2000 + int(arxiv.group(1))
    years = [int(y) for y in _YEAR.findall(text_of(row.get("source")))]
    return max(years) if years else None


def flag(value, field: str) -> bool | None:
    """A yes/no field that may come as a bool or as text ('true', 'yes', 'on', 'no')."""
    if value is None or isinstance(value, bool):
        return value
    t = words(value)
    if re.match(r"(?:true|yes|on|enabled?|1)\b", t):
        return True
    if _OFF.match(t):
        return False
    raise SpecError(field, "true or false", value)


def count(section: dict, key: str, where: str, minimum: int = 1) -> int | None:
    """A whole-number field (None when missing): ints, integral floats and digit strings ('8', '4,096')
    are taken; anything else is refused naming the field."""
    v = section.get(key)
    if v is None:
        return None
    if isinstance(v, str) and re.fullmatch(r"\s*\d[\d,_]*\s*", v):
        v = int(re.sub(r"[\s,_]", "", v))
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise SpecError(f"{where}.{key}", f"a whole number >= {minimum}", v)
    return v


# accelerator text -> catalogue name (hardware/catalog.yaml), on normalised text, most specific first
_PARTS = [(r"\bgb300\b", "gb300"), (r"\bb300\b", "b300"), (r"\bgb200\b", "gb200"), (r"\bb200\b", "b200"),
          (r"\bh200\b", "h200"), (r"\bh800\b", "h800"),
          (r"\bh20\b", "h20"), (r"\bmi300x\b", "mi300x"), (r"\bmi325x\b", "mi325x"), (r"\bmi350x\b", "mi350x"),
          (r"\bmi355x\b", "mi355x"), (r"\bgaudi ?2\b", "gaudi2"), (r"\bgaudi ?3\b", "gaudi3"),
          (r"\ba100\b", "a100"), (r"\ba800\b", "a800"), (r"\bh100\b", "h100-sxm"),
          (r"\b910c\b", "ascend-910c"), (r"\b910b\d?\b", "ascend-910b"), (r"\bgh200\b", "gh200"),
          (r"\bmi250x\b", "mi250x-gcd")]
# parts people train on that the catalogue does not hold: refused by name, never priced as a neighbour
# (a PCIe or NVL card has another peak, memory and no 8-GPU NVSwitch domain; MI250 is not the MI250X)
_NOT_IN_CATALOGUE = r"\b(?:pcie|nvl(?! ?\d)|v100|a10|a30|a40|l4|l40s?|mi250|mi210|gaudi(?! ?[23]\b)\d?|910|910a)\b"
# TPUs are in the catalogue, but a slice is an ICI torus the cluster model does not express (docs/cluster.md):
# validate refuses them by name too
_NOT_PRICED = r"\btpu\b"
_FORM_FACTOR = r"\b(?:sxm\d?|hgx|dgx|hbm3|eos|selene|nvswitch)\b"


# parts sold with more than one memory size: (the text's size, a match without a number meaning the GB
# after it, catalogue names by GB, the GB assumed when neither the text nor hardware.hbm_gb states one, the
# note saying so); the GH200 comes as 96 GB HBM3 or 141/144 GB HBM3e (hardware catalog)
_MEMORY_VARIANTS = {
    "a100": (r"\b(40|80) ?g(?:b|ib)?\b", None, {40: "a100-40gb", 80: "a100-80gb"}, 80,
             "A100 80GB (memory size not stated)"),
    "gh200": (r"\b(96|14[14]) ?g(?:b|ib)?\b|\bhbm3e\b", 141, {96: "gh200", 141: "gh200-141gb", 144: "gh200-141gb"}, 96,
              "GH200 96 GB HBM3 (memory size not stated)"),
}


def _memory_variant(part: str, t: str, hbm_gb, assumed: list[str] | None) -> str:
    """The catalogue name of a `_MEMORY_VARIANTS` part: the size the text states, else hardware.hbm_gb,
    else the assumed one (noted in `assumed`)."""
    pattern, unnumbered, names, default, note = _MEMORY_VARIANTS[part]
    found = re.search(pattern, t)
    if found:
        stated = int(found.group(1)) if found.group(1) else unnumbered
    else:
        stated = hbm_gb if isinstance(hbm_gb, (int, float)) and hbm_gb in names else None
    if stated is None:
        if assumed is not None:
            assumed.append(note)
        stated = default
    return names[stated]


def catalog_part(text, hbm_gb=None, assumed: list[str] | None = None) -> str:
    """The catalogue name of a row's `hardware.gpu` text. An A100 takes its memory size from the text
    ('40GB', '40G') or from `hardware.hbm_gb`, else 80 GB (assumed); a GH200 likewise (96 GB HBM3 unless
    the text or hbm_gb says 141/144 GB or HBM3e); an MI250X is priced per GCD. A part the catalogue lacks
    (PCIe/NVL cards, V100, MI250, Gaudi 1) and a TPU (not a switched cluster) are SpecErrors naming them."""
    t = words(text)
    if re.search(_NOT_PRICED, t):
        raise SpecError("hardware.gpu", "a GPU or NPU in a switched cluster (TPU slices are ICI tori the cluster model "
                        "does not express)", text)
    miss = re.search(_NOT_IN_CATALOGUE, t) if mentions(t, _NOT_IN_CATALOGUE) else None  # "SXM5, not PCIe"
    name = next((n for pat, n in _PARTS if re.search(pat, t)), None)
    if miss or name is None:
        what = f"not in the catalogue: {miss.group(0)!r}" if miss else "an accelerator in the hardware catalogue"
        raise SpecError("hardware.gpu", f"one of gb300, b300, gb200, b200, h200, h800, h20, h100 (SXM), gh200, "
                        f"a100 (SXM 40/80 GB), a800, mi250x, mi300x, mi325x, mi350x, mi355x, gaudi2, gaudi3, "
                        f"ascend 910b/910c ({what})", text)
    if name in _MEMORY_VARIANTS:
        name = _memory_variant(name, t, hbm_gb, assumed)
    if name == "mi250x-gcd" and assumed is not None:
        assumed.append("MI250X: one GCD counted as one GPU (8 per node, as Slurm and ROCm count them)")
    if name in ("a100-40gb", "a100-80gb", "a800", "h100-sxm") and not re.search(_FORM_FACTOR, t) \
            and assumed is not None:
        assumed.append(f"{name}: the SXM part (no form factor named)")
    return name


def unstated_zero(p: dict, distributed_optimizer: bool, assumed: list[str]) -> int:
    """The ZeRO stage of a row without zero_or_fsdp: NeMo / Megatron-Bridge default to the distributed
    optimizer (ZeRO-1); Llama 3's FSDP shards optimizer states and gradients and keeps the weights after
    the forward (ZeRO-2, arXiv 2407.21783 s.3.3.2); a framework text that names a stage ('DeepSpeed
    ZeRO-2', 'PyTorch FSDP' = 3) gives it; torchtitan (data_parallel_shard_degree -1: every DP rank
    shards, config_manager.py) and MaxText (ici_fsdp_parallelism -1, configs/base.yml) shard fully
    (ZeRO-3) by default -- but FSDP under pipeline parallelism keeps the weights gathered across the
    micro-batches (torchtitan parallelize_llama.py apply_fsdp: reshard_after_forward = not pp_enabled
    under its default policy): ZeRO-2."""
    from wanka.plan.frameworks import family_of

    if distributed_optimizer:
        assumed.append("distributed optimizer (ZeRO-1)")
        return 1
    family, named = family_of(p.get("framework")), zero_stage(p.get("framework"))
    pp = p.get("pp") if isinstance(p.get("pp"), int) else 1
    if family == "llama3":
        assumed.append("ZeRO-2 (Llama 3's FSDP, s.3.3.2)")
        return 2
    if family in ("fsdp", "torchtitan") and pp > 1 and named in (0, 3):
        assumed.append("ZeRO-2 (FSDP keeps the weights gathered under pipeline parallelism)")
        return 2
    # the stage a sharding engine's name carries ("DeepSpeed ZeRO stage 2", "PyTorch FSDP"); not a
    # Megatron text listing alternatives (SC'21's "Megatron-LM / DeepSpeed ZeRO-3" runs PTD-P without it)
    if named and family in ("deepspeed", "megatron-deepspeed", "fsdp", "torchtitan", "jax-xla"):
        assumed.append(f"ZeRO-{named} as parallelism.framework names it")
        return named
    if family in ("torchtitan", "jax-xla"):
        assumed.append(f"ZeRO-3 ({family}'s default full sharding)")
        return 3
    return 0


def tp_overlap_named(text: str) -> bool:
    """TP communication overlap asked for: --tp-comm-overlap, 'TP comm overlap', 'tensor-parallel
    communication overlap', Transformer Engine 'userbuffers' -- not negated ('no TP overlap')."""
    return mentions(words(text), r"\btp (?:comm(?:unication)? )?overlap|tensor parallel(?: comm(?:unication)?)? overlap"
                                 r"|\buserbuffers?\b")


def row_gpus(row: dict, assumed: list[str] | None = None) -> int:
    """hardware.gpu_count, else tp x pp x cp x dp when the row states all four (assumed)."""
    hw, p = section(row, "hardware"), section(row, "parallelism")
    gpus = count(hw, "gpu_count", "hardware")
    if gpus is None:
        degrees = [count(p, k, "parallelism") for k in ("tp", "pp", "dp")] + [count(p, "cp", "parallelism") or 1]
        if None in degrees:
            raise SpecError("hardware.gpu_count", "the run's GPU count (or tp, pp and dp to derive it)", None)
        gpus = math.prod(degrees)
        if assumed is not None:
            assumed.append("gpu_count = tp pp cp dp")
    return gpus


def row_seq_len(row: dict) -> int | None:
    """architecture.seq_len, else parallelism.seq_len (some rows keep it with the batch)."""
    return count(section(row, "architecture"), "seq_len", "architecture") or count(
        section(row, "parallelism"), "seq_len", "parallelism")


def section(row: dict, key: str) -> dict:
    """A row's section (architecture, hardware, parallelism, result); {} when missing or not a mapping."""
    v = row.get(key)
    return v if isinstance(v, dict) else {}
