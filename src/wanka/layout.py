"""The Layout: how one training job is laid out on GPUs (DESIGN.md "Layout string").

    tp=8,pp=16,dp=128,cp=1,ep=1,vpp=1,mbs=1,gbs=2048,zero=1,recompute=selective,precision=bf16,sp=true

Degrees: tp (tensor), pp (pipeline stages), vpp (virtual stages per rank, interleaved 1F1B),
cp (context), dp (data; may be omitted and derived from the GPU count), ep (expert parallel: the
experts are sharded over the dp*cp ranks, as in Megatron-Core), etp (expert tensor parallel,
Megatron-Core --expert-tensor-parallel-size: omitted, the experts are split like the dense layers
over tp when ep divides dp*cp, else etp=1 is inferred (the EP group spans the TP ranks); given, the experts are split over etp ranks and ep*etp divides
tp*cp*dp, so with etp=1 an EP group may span the TP ranks), dp_shard (HSDP: FSDP shard group
size inside dp, default all of dp when zero=3). Batch: mbs (sequences per micro-batch), gbs
(sequences per step; default dp*mbs*pp: pp micro-batches per pipeline, the fewest that fill a
1F1B pipeline and that interleaving accepts; dp*mbs when pp is 1). Memory: zero 0-3 (1 = sharded
optimizer states, 2 = + gradients, 3 = + parameters, i.e. FSDP), recompute none|selective|full.
precision bf16|fp16|fp8|fp32. sp (sequence parallel) defaults to true when tp > 1.

Every field is checked on construction (SpecError 'layout.<key>'); resolve(gpus, model) gives the
ResolvedLayout (wanka.resolved_layout) that owns dp, micro-batches, expert_dp and the rank order
(Megatron-Core's: tp innermost, then cp, dp, pp; experts etp, ep, expert_dp, pp).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from wanka.errors import SpecError

if TYPE_CHECKING:
    from wanka.resolved_layout import ResolvedLayout
    from wanka.workload.spec import ModelSpec

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
_INT_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "zero", "dp_shard")
_DEGREES = ("tp", "pp", "cp", "ep", "vpp", "mbs")  # integers >= 1
_OPTIONAL_DEGREES = ("dp", "gbs", "dp_shard", "etp")  # None (derived) or integers >= 1


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    vpp: int = 1
    mbs: int = 1
    gbs: int | None = None
    zero: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    sp: bool | None = None
    dp_shard: int | None = None

    # ---- parsing -----------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, field: str = "layout") -> "Layout":
        values: dict[str, object] = {}
        names = {f.name for f in fields(cls)}
        items = [s.strip() for s in text.split(",")] if text.strip() else []
        for item in items:
            if not item:  # ",," or a stray comma: a key=value pair went missing
                raise SpecError(field, "comma-separated key=value pairs like tp=8,pp=4 (an entry is empty)", text)
            if "=" not in item:
                raise SpecError(field, "comma-separated key=value pairs like tp=8,pp=4", item)
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in names:
                raise SpecError(f"{field}.{key}", f"a layout key ({', '.join(sorted(names))})", key)
            if key in values:
                raise SpecError(f"{field}.{key}", "each key once", item)
            values[key] = _parse_value(key, raw, field)
        try:
            return cls(**values)
        except SpecError as exc:  # name the field as the caller knows it (--layout.tp, jobs[0].layout.tp)
            raise SpecError(field + exc.field.removeprefix("layout"), exc.expected, exc.got) from None

    def __post_init__(self) -> None:
        """Every field checked on construction, from Python as from the CLI (SpecError 'layout.<key>')."""
        check_layout_fields(self)

    # ---- derived -----------------------------------------------------------------------------
    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else (self.sp and self.tp > 1)

    @property
    def expert_tp(self) -> int:
        """Ranks one expert's weights are split over (etp, else tp)."""
        return self.tp if self.etp is None else self.etp

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def resolve(self, gpus: int, model: "ModelSpec | None" = None, field: str = "layout") -> "ResolvedLayout":
        """Fill dp and gbs from the GPU count; the ResolvedLayout checks every cross-field
        constraint and owns the groups (wanka.resolved_layout); `model` adds the model's checks."""
        from wanka.resolved_layout import ResolvedLayout

        mp = self.model_parallel
        dp = self.dp
        if dp is None:
            if gpus % mp:
                raise SpecError(f"{field}", f"tp*pp*cp ({mp}) dividing the GPU count ({gpus})")
            dp = gpus // mp
        if mp * dp != gpus:
            raise SpecError(f"{field}", f"tp*pp*cp*dp == GPUs ({gpus}); {self} gives {mp * dp}")
        gbs = self.gbs if self.gbs is not None else dp * self.mbs * self.pp
        etp = self.etp
        if etp is None and (dp * self.cp) % self.ep:
            # an EP group wider than dp*cp spans the TP ranks: the experts cannot also be split over
            # tp, so etp is 1 (Megatron-Core builds its expert groups over tp*cp*dp ranks in the
            # order etp, ep, expert-dp: parallel_state.py, expert RankGenerator)
            if (self.tp * self.cp * dp) % self.ep:
                raise SpecError(f"{field}.ep", f"a divisor of tp*cp*dp ({self.tp * self.cp * dp})", self.ep)
            etp = 1
        values = {f.name: getattr(self, f.name) for f in fields(Layout)} | {"dp": dp, "gbs": gbs, "etp": etp}
        try:
            out = ResolvedLayout(**values)
        except SpecError as exc:
            raise SpecError(field + exc.field.removeprefix("layout"), exc.expected, exc.got) from None
        if model is not None:
            out.check_model(model, field)
        return out

    def check_model(self, model: "ModelSpec", field: str = "layout") -> None:
        if model.heads % self.tp:
            raise SpecError(f"{field}.tp", f"a divisor of the model's heads ({model.heads})", self.tp)
        kv = model.kv_heads_
        if kv % self.tp and self.tp % kv:
            raise SpecError(f"{field}.tp", f"a divisor or multiple of kv_heads ({kv})", self.tp)
        # every model chunk holds at least one layer; the embedding and the loss may count as one each
        # (Megatron-Core --account-for-embedding/loss-in-pipeline-split: Llama 3 405B's 126 layers
        # on 16 stages x 8 chunks)
        if model.layers + 2 < self.pp * self.vpp:
            raise SpecError(f"{field}.pp", f"pp*vpp at most the model's layers + 2 ({model.layers + 2}: "
                            "embedding and loss as pipeline layers)", self.pp * self.vpp)
        if self.ep > 1:
            if model.moe is None:
                raise SpecError(f"{field}.ep", "1 for a dense model (expert parallelism needs moe)", self.ep)
            if model.moe.experts % self.ep:
                raise SpecError(f"{field}.ep", f"a divisor of the experts ({model.moe.experts})", self.ep)
        if model.seq_len % self.cp:
            raise SpecError(f"{field}.cp", f"a divisor of seq_len ({model.seq_len})", self.cp)

    def __str__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            parts.append(f"{f.name}={str(value).lower() if isinstance(value, bool) else value}")
        return ",".join(parts)


def _parse_value(key: str, raw: str, field: str) -> object:
    if key in _INT_KEYS:
        try:
            return int(raw)
        except ValueError:
            raise SpecError(f"{field}.{key}", "an integer", raw) from None
    if key == "sp":
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise SpecError(f"{field}.sp", "true or false", raw)
    return raw.lower()


def check_layout_fields(lay: Layout, field: str = "layout") -> None:
    """One-field checks (types, ranges, names) of a Layout; cross-field ones need the GPU count
    and live in ResolvedLayout."""
    # type(v) is int: True is an int to Python, not a degree (and this runs for every searched layout)
    for key in _DEGREES:
        value = getattr(lay, key)
        if type(value) is not int or value < 1:
            raise SpecError(f"{field}.{key}", "an integer >= 1", value)
    for key in _OPTIONAL_DEGREES:
        value = getattr(lay, key)
        if value is not None and (type(value) is not int or value < 1):
            raise SpecError(f"{field}.{key}", "an integer >= 1 (or omitted)", value)
    if type(lay.zero) is not int or lay.zero not in (0, 1, 2, 3):
        raise SpecError(f"{field}.zero", "0, 1, 2 or 3", lay.zero)
    if lay.recompute not in RECOMPUTE:
        raise SpecError(f"{field}.recompute", " | ".join(RECOMPUTE), lay.recompute)
    if lay.precision not in PRECISIONS:
        raise SpecError(f"{field}.precision", " | ".join(PRECISIONS), lay.precision)
    if lay.sp is not None and not isinstance(lay.sp, bool):
        raise SpecError(f"{field}.sp", "true or false (or omitted)", lay.sp)
    if lay.vpp > 1 and lay.pp == 1:
        raise SpecError(f"{field}.vpp", "1 when pp is 1 (interleaving needs pipeline stages)", lay.vpp)
