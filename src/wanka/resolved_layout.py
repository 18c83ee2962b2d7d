"""ResolvedLayout: a Layout with dp and gbs known, checked once, owning every derived quantity
and the rank order (which ranks form each communication group).

    lay = Layout.parse("tp=8,pp=4,cp=2,ep=8,etp=1,gbs=512").resolve(gpus=1024, model=m)
    lay.dp, lay.microbatches, lay.expert_dp          # 16, 32, 32
    lay.group("ep")                                  # (8, 1): 8 ranks at stride 1
    lay.group("dp_cp")                               # (32, 8): 32 ranks at stride 8

Rank order (Megatron-Core megatron/core/parallel_state.py, initialize_model_parallel and
RankGenerator, order "tp-cp-ep-dp-pp"): two decompositions of the same ranks that share the
pipeline groups --
  dense layers   tp innermost, then cp, dp, pp   (RankGenerator(tp, ep=1, dp, pp, cp))
  routed experts etp innermost, then ep, expert_dp, pp   (RankGenerator(tp=etp, ep, dp=expert_dp,
                 pp, cp=1)); etp defaults to tp (--expert-tensor-parallel-size), expert_dp =
                 tp*cp*dp / (etp*ep), so an EP group folds over the cp and dp ranks ("MoE parallel
                 folding").
FSDP/HSDP (torchtitan ParallelDims, mesh (pp, dp_replicate, dp_shard, cp, tp)): dp splits into
dp_shard inner and dp_replicate outer, so the shard group is contiguous in dp.

A group of `size` ranks at `stride` holds ranks r, r+stride, ..., r+(size-1)*stride: that is what
wanka.comm.group_for_stride places on the cluster hierarchy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

from wanka.errors import SpecError
from wanka.layout import Layout

# each group kind -> the dimensions it spans, in one of the two orders below
DENSE_ORDER = ("tp", "cp", "dp_shard", "dp_replicate", "pp")  # dp = dp_shard x dp_replicate
EXPERT_ORDER = ("etp", "ep", "expert_dp", "pp")
GROUP_DIMS = {
    "tp": ("tp",), "cp": ("cp",), "dp": ("dp_shard", "dp_replicate"), "dp_cp": ("cp", "dp_shard", "dp_replicate"),
    "dp_shard": ("dp_shard",), "dp_shard_cp": ("cp", "dp_shard"), "dp_replicate": ("dp_replicate",),
    "pp": ("pp",), "etp": ("etp",), "ep": ("ep",), "expert_dp": ("expert_dp",),
}
GROUP_KINDS = tuple(GROUP_DIMS)


@dataclass(frozen=True)
class ResolvedLayout(Layout):
    """A Layout whose dp and gbs are set and whose cross-field constraints hold (SpecError
    'layout.<key>' otherwise). Build it with Layout.resolve(gpus, model) or directly."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dp is None or self.gbs is None:
            raise SpecError("layout.dp" if self.dp is None else "layout.gbs",
                            "a value (a ResolvedLayout has dp and gbs; use Layout.resolve(gpus))")
        dp = self.dp
        if self.gbs % (dp * self.mbs):
            raise SpecError("layout.gbs", f"a multiple of dp*mbs ({dp * self.mbs})", self.gbs)
        if self.etp is None and (dp * self.cp) % self.ep:
            raise SpecError("layout.ep", f"a divisor of dp*cp ({dp * self.cp}), or give etp", self.ep)
        if self.etp is not None:
            if self.tp % self.etp:
                raise SpecError("layout.etp", f"a divisor of tp ({self.tp})", self.etp)
            if (self.tp * self.cp * dp) % (self.ep * self.etp):
                raise SpecError("layout.ep", f"ep*etp dividing tp*cp*dp ({self.tp * self.cp * dp})",
                                self.ep * self.etp)
        if self.dp_shard is not None and dp % self.dp_shard:
            raise SpecError("layout.dp_shard", f"a divisor of dp ({dp})", self.dp_shard)
        if self.vpp > 1 and self.microbatches % self.pp:
            raise SpecError("layout.vpp", f"micro-batches ({self.microbatches}) divisible by pp ({self.pp}) "
                            "for interleaving", self.vpp)

    @classmethod
    def of(cls, lay: Layout) -> "ResolvedLayout":
        """`lay` itself when resolved, else a ResolvedLayout of its fields (dp and gbs must be set)."""
        if isinstance(lay, ResolvedLayout):
            return lay
        return cls(**{f.name: getattr(lay, f.name) for f in fields(Layout)})

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def microbatches(self) -> int:
        """Micro-batches per step per pipeline (gradient-accumulation steps): gbs / (dp*mbs)."""
        return self.gbs // (self.dp * self.mbs)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts (expert data parallel): tp*cp*dp / (ep*etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def dp_shard_size(self) -> int:
        """Ranks of dp one FSDP shard spans: dp_shard when given, else all of dp (none at zero 0)."""
        if self.dp_shard is not None:
            return self.dp_shard
        return 1 if self.zero == 0 else self.dp

    @property
    def dp_replicas(self) -> int:
        return self.dp // self.dp_shard_size

    @property
    def zero_shards(self) -> tuple[int, int]:
        """(dense, expert) ranks one parameter's ZeRO state is split over: dp*cp (ZeRO-1/2, and
        ZeRO-3 without HSDP), dp_shard*cp under HSDP; the experts' in proportion (tp/(ep*etp))."""
        dense = (self.dp_shard if (self.zero == 3 and self.dp_shard) else self.dp) * self.cp
        return dense, max(1, dense * self.tp // (self.ep * self.expert_tp))

    # ---- groups ----------------------------------------------------------------------------
    @cached_property
    def _dims(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "dp_shard": self.dp_shard_size, "dp_replicate": self.dp_replicas,
                "pp": self.pp,
                "etp": self.expert_tp, "ep": self.ep, "expert_dp": self.expert_dp}

    def group(self, kind: str) -> tuple[int, int]:
        """(size, stride) of the `kind` group (GROUP_KINDS): the closed form of members(); the
        stride is the product of the dimensions inside the group's first one in its order."""
        tp, cp, dp, etp = self.tp, self.cp, self.dp, self.expert_tp
        if kind == "tp":
            return tp, 1
        if kind == "cp":
            return cp, tp
        if kind == "dp":
            return dp, tp * cp
        if kind == "dp_cp":
            return dp * cp, tp
        if kind == "pp":
            return self.pp, tp * cp * dp
        if kind == "etp":
            return etp, 1
        if kind == "ep":
            return self.ep, etp
        if kind == "expert_dp":
            return self.expert_dp, etp * self.ep
        shard = self.dp_shard_size
        if kind == "dp_shard":
            return shard, tp * cp
        if kind == "dp_shard_cp":
            return shard * cp, tp
        if kind == "dp_replicate":
            return dp // shard, tp * cp * shard
        raise SpecError("group", " | ".join(GROUP_KINDS), kind)

    def coords(self, rank: int, expert: bool = False) -> dict[str, int]:
        """Coordinates of `rank` in the dense (or expert) order, innermost first."""
        out = {}
        for d in EXPERT_ORDER if expert else DENSE_ORDER:
            rank, out[d] = divmod(rank, self._dims[d])
        return out

    def members(self, kind: str, rank: int) -> list[int]:
        """Ranks of `rank`'s `kind` group, from the coordinates (the ranks that differ from it only
        in the group's dimensions); group(kind) is the closed form of this."""
        dims = GROUP_DIMS[kind]
        expert = dims[0] in EXPERT_ORDER
        mine = self.coords(rank, expert)
        return [r for r in range(self.world_size)
                if all(v == mine[d] for d, v in self.coords(r, expert).items() if d not in dims)]
