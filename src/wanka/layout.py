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

Ranks map onto the cluster hierarchy with tp innermost, then cp, ep (inside dp), dp, pp outermost.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from wanka.errors import SpecError

if TYPE_CHECKING:
    from wanka.workload.spec import ModelSpec

RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
_INT_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "zero", "dp_shard")


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
        for item in filter(None, (s.strip() for s in text.split(","))):
            if "=" not in item:
                raise SpecError(field, "comma-separated key=value pairs like tp=8,pp=4", item)
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in names:
                raise SpecError(f"{field}.{key}", f"a layout key ({', '.join(sorted(names))})", key)
            if key in values:
                raise SpecError(f"{field}.{key}", "each key once", item)
            values[key] = _parse_value(key, raw, field)
        return cls(**values)._checked(field)

    def _checked(self, field: str = "layout") -> "Layout":
        for key in ("tp", "pp", "cp", "ep", "vpp", "mbs"):
            if getattr(self, key) < 1:
                raise SpecError(f"{field}.{key}", "an integer >= 1", getattr(self, key))
        for key in ("dp", "gbs", "dp_shard", "etp"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise SpecError(f"{field}.{key}", "an integer >= 1", value)
        if self.zero not in (0, 1, 2, 3):
            raise SpecError(f"{field}.zero", "0, 1, 2 or 3", self.zero)
        if self.recompute not in RECOMPUTE:
            raise SpecError(f"{field}.recompute", " | ".join(RECOMPUTE), self.recompute)
        if self.precision not in PRECISIONS:
            raise SpecError(f"{field}.precision", " | ".join(PRECISIONS), self.precision)
        if self.vpp > 1 and self.pp == 1:
            raise SpecError(f"{field}.vpp", "1 when pp is 1 (interleaving needs pipeline stages)", self.vpp)
        return self

    # ---- derived -----------------------------------------------------------------------------
    @property
    def sequence_parallel(self) -> bool:
        return self.tp > 1 if self.sp is None else (self.sp and self.tp > 1)

    @property
    def expert_tp(self) -> int:
        """Ranks one expert's weights are split over (etp, else tp)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts (expert data parallel): tp*cp*dp / (ep*etp)."""
        assert self.dp is not None, "call resolve() first"
        return max(1, self.tp * self.cp * self.dp // (self.ep * self.expert_tp))

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per pipeline (gradient-accumulation steps)."""
        assert self.dp is not None and self.gbs is not None, "call resolve() first"
        return self.gbs // (self.dp * self.mbs)

    def resolve(self, gpus: int, model: "ModelSpec | None" = None, field: str = "layout") -> "Layout":
        """Fill dp and gbs from the GPU count and check every constraint against it and the model."""
        mp = self.model_parallel
        dp = self.dp
        if dp is None:
            if gpus % mp:
                raise SpecError(f"{field}", f"tp*pp*cp ({mp}) dividing the GPU count ({gpus})")
            dp = gpus // mp
        if mp * dp != gpus:
            raise SpecError(f"{field}", f"tp*pp*cp*dp == GPUs ({gpus}); {self} gives {mp * dp}")
        gbs = self.gbs if self.gbs is not None else dp * self.mbs * self.pp
        if gbs % (dp * self.mbs):
            raise SpecError(f"{field}.gbs", f"a multiple of dp*mbs ({dp * self.mbs})", gbs)
        etp = self.etp
        if etp is None and (dp * self.cp) % self.ep:
            # an EP group wider than dp*cp spans the TP ranks: the experts cannot also be split over
            # tp, so etp is 1 (Megatron-Core builds its expert groups over tp*cp*dp ranks in the
            # order etp, ep, expert-dp: parallel_state.py, expert RankGenerator)
            if (self.tp * self.cp * dp) % self.ep:
                raise SpecError(f"{field}.ep", f"a divisor of tp*cp*dp ({self.tp * self.cp * dp})", self.ep)
            etp = 1
        if etp is not None:
            if self.tp % etp:
                raise SpecError(f"{field}.etp", f"a divisor of tp ({self.tp})", etp)
            if (self.tp * self.cp * dp) % (self.ep * etp):
                raise SpecError(f"{field}.ep", f"ep*etp dividing tp*cp*dp ({self.tp * self.cp * dp})",
                                self.ep * etp)
        if self.dp_shard is not None and dp % self.dp_shard:
            raise SpecError(f"{field}.dp_shard", f"a divisor of dp ({dp})", self.dp_shard)
        out = replace(self, dp=dp, gbs=gbs, etp=etp)
        if self.vpp > 1 and out.microbatches % self.pp:
            raise SpecError(f"{field}.vpp", f"micro-batches ({out.microbatches}) divisible by pp ({self.pp}) for interleaving", self.vpp)
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
