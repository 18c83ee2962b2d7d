"""ParallelDims: a resolved Layout checked against the world size, and its named device meshes.

Rank order (wanka.resolved_layout.ResolvedLayout, Megatron-Core's): tp innermost, then cp, then dp
(split into dp_replicate x dp_shard for HSDP, shard inner), pp outermost: a mesh of shape
(pp, dp_replicate, dp_shard, cp, tp). ep > 1 splits dp into EP groups (train/experts.py); cp runs
ring attention (train/ring_attention.py).
ZeRO mapping onto FSDP2: zero=0 -> pure replication (dp_shard=1), zero=1/2 -> fully_shard with
reshard_after_forward=False (parameters stay gathered between forward and backward, ZeRO-2-like),
zero=3 -> reshard_after_forward=True. An explicit dp_shard < dp gives HSDP.
"""

from __future__ import annotations

from dataclasses import dataclass

from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.resolved_layout import ResolvedLayout
from wanka.workload.spec import ModelSpec


@dataclass(frozen=True)
class ParallelDims:
    layout: ResolvedLayout
    world_size: int
    pp: int
    dp_replicate: int
    dp_shard: int
    tp: int
    ep: int = 1  # expert parallel: groups of ep consecutive dp ranks (Megatron-Core; train/experts.py)
    cp: int = 1  # context parallel: ranks between dp_shard and tp (train/ring_attention.py)

    @classmethod
    def from_layout(cls, text_or_layout: str | Layout, world_size: int, model: ModelSpec,
                    cuda: bool | None = None) -> "ParallelDims":
        """`cuda`: whether the ranks will have GPUs (None: this machine's answer; `wanka launch` says True)."""
        layout = Layout.parse(text_or_layout) if isinstance(text_or_layout, str) else text_or_layout
        layout = layout.resolve(world_size, model)
        if layout.cp > 1:
            _check_cp(layout, model)
        if layout.ep > 1 and layout.dp % layout.ep:
            # Layout.resolve accepts ep dividing dp*cp; the runtime's EP groups are inside dp
            raise SpecError("layout.ep", f"a divisor of dp ({layout.dp}) in the runtime", layout.ep)
        if layout.etp is not None and layout.etp != layout.tp:
            raise SpecError("layout.etp", f"omitted or tp ({layout.tp}): the runtime splits experts like the dense "
                            "layers", layout.etp)
        if layout.precision == "fp8" and not (_cuda() if cuda is None else cuda):
            raise SpecError("layout.precision", "bf16 or fp32 on CPU (fp8 needs a CUDA GPU)", "fp8")
        if layout.precision == "fp16":
            raise SpecError("layout.precision", "bf16, fp32 or fp8 (fp16 needs loss scaling, not implemented)", "fp16")
        if model.kv_heads_ % layout.tp:
            raise SpecError("layout.tp", f"a divisor of kv_heads ({model.kv_heads_}) in the runtime", layout.tp)
        if layout.pp > 1 and model.tied_embeddings:
            raise SpecError("layout.pp", "1 for a model with tied embeddings", layout.pp)
        if layout.vpp > 1 and model.layers % (layout.pp * layout.vpp):
            raise SpecError("layout.vpp", f"pp*vpp dividing the layers ({model.layers})", layout.vpp)
        if model.moe is not None and layout.tp > 1:
            raise SpecError("layout.tp", "1 for MoE models (TP of experts is not implemented)", layout.tp)
        if layout.sequence_parallel and model.seq_len % layout.tp:
            raise SpecError("layout.tp", f"a divisor of seq_len ({model.seq_len}) for sequence parallelism", layout.tp)
        if layout.pp > 1 and layout.microbatches < layout.pp:
            raise SpecError("layout.gbs", f"at least pp ({layout.pp}) micro-batches per step (gbs >= dp*mbs*pp)", layout.gbs)
        # the ResolvedLayout's rank order: tp, cp, dp_shard, dp_replicate, pp (wanka.resolved_layout)
        return cls(layout, world_size, layout.pp, layout.dp_replicas, layout.dp_shard_size, layout.tp, layout.ep, layout.cp)

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.cp, self.tp)

    names = ("pp", "dp_replicate", "dp_shard", "cp", "tp")

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of `rank` in the (pp, dp_replicate, dp_shard, cp, tp) mesh."""
        out = {}
        for name, size in reversed(list(zip(self.names, self.shape))):
            rank, out[name] = divmod(rank, size)
        return out

    def dp_rank(self, rank: int) -> int:
        c = self.coords(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def ep_rank(self, rank: int) -> int:
        """Position of `rank` in its EP group (ep consecutive dp ranks)."""
        return self.dp_rank(rank) % self.ep

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same experts: dp / ep (tp is 1 for MoE in the runtime)."""
        return self.dp // self.ep

    def build_mesh(self):
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh("cpu" if not _cuda() else "cuda", self.shape, mesh_dim_names=self.names)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_moe_options(cfg, model: ModelSpec, dims: ParallelDims) -> None:
    """The TrainConfig's MoE knobs fit the model and layout (SpecError otherwise)."""
    moe_knobs = cfg.moe_capacity_factor is not None or cfg.moe_bias_rate > 0 or cfg.moe_redundant_experts is not None
    if moe_knobs and model.moe is None:
        raise SpecError("model", "an MoE model for the --moe-* options", model.name)
    if cfg.moe_redundant_experts is not None:
        from wanka.train.eplb import check_redundant

        if dims.ep < 2:
            raise SpecError("moe-redundant-experts", "used with a layout of ep >= 2 (expert placement is per EP rank)",
                            cfg.moe_redundant_experts)
        check_redundant(model.moe.experts, dims.ep, cfg.moe_redundant_experts)


def _check_cp(layout: Layout, model: ModelSpec) -> None:
    """What the runtime's ring attention supports: cp with plain FSDP over dp, dense models."""
    for key, ok in (("tp", layout.tp == 1), ("pp", layout.pp == 1), ("ep", layout.ep == 1)):
        if not ok:
            raise SpecError(f"layout.{key}", "1 with cp > 1 (the runtime's context parallelism runs with dp only)",
                            getattr(layout, key))
    if layout.dp_shard is not None and layout.dp_shard != layout.dp:
        raise SpecError("layout.dp_shard", "omitted or dp with cp > 1 (no HSDP with context parallelism)",
                        layout.dp_shard)
    if layout.zero == 0:
        raise SpecError("layout.zero", "1, 2 or 3 with cp > 1 (parameters are sharded over dp x cp)", 0)
    if model.moe is not None:
        raise SpecError("layout.cp", "1 for MoE models (a cp slice's balancing loss differs)", layout.cp)
    if model.seq_len % (2 * layout.cp):
        raise SpecError("layout.cp", f"cp with 2*cp dividing seq_len ({model.seq_len}): zigzag chunks", layout.cp)
