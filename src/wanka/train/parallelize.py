"""Apply a Layout to the model, in torchtitan's fixed order: TP/SP -> activation checkpointing ->
torch.compile -> FSDP2. Pipeline stages are cut first (apply_pp) and each stage gets the rest.

Why this order: tensor parallelism swaps parameters for DTensors sharded over "tp", which FSDP2
then shards again over dp (2-D); checkpointing and compile wrap whole blocks, so they must see the
TP-ed block, and FSDP must wrap last so its all-gathers sit around the compiled/checkpointed code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from wanka.errors import SpecError
from wanka.model.decoder import Transformer, build_model
from wanka.train.parallel_dims import ParallelDims

PP_SCHEDULES = ("gpipe", "1f1b", "interleaved")


def apply_tp(model: Transformer, tp_mesh, sequence_parallel: bool) -> None:
    """Megatron-style TP (Shoeybi et al. 2019, arXiv:1909.08053 section 3): q/k/v and w1/w3 split by
    columns, wo and w2 by rows; with SP (Korthikanti et al. 2022, arXiv:2205.05198 section 4.2.2)
    the norms and residual stream are sharded along the sequence between the TP regions."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    seq = Shard(1) if sequence_parallel else Replicate()
    top: dict = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.norm is not None:
        if sequence_parallel:
            top["norm"] = SequenceParallel()
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    if top:
        parallelize_module(model, tp_mesh, top)
    for block in model.layers.values():
        plan: dict = {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=seq),
            "feed_forward.w3": ColwiseParallel(),
        }
        if sequence_parallel:
            plan.update({
                "attention_norm": SequenceParallel(), "ffn_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, tp_mesh, plan)


def apply_ac(model: Transformer, recompute: str) -> None:
    """full: recompute each block in backward; selective: only the attention core (softmax(QK^T)V),
    the memory-heavy, FLOP-light part (Korthikanti et al. 2022, section 5)."""
    for block in model.layers.values():
        block.recompute = recompute == "full"
        block.attention.recompute_core = recompute == "selective"


def apply_compile(model: Transformer) -> None:
    for block in model.layers.values():
        block.compile()


def apply_fsdp(model: nn.Module, dp_mesh, reshard_after_forward: bool, bf16: bool, ignored: set | None = None,
               reduce_dtype: torch.dtype | None = None, reduce_scatter=None) -> None:
    """FSDP2 per block then the root (Zhao et al. 2023, arXiv:2304.11277); a 2-D dp mesh gives HSDP.
    `ignored`: parameters FSDP leaves alone (expert-parallel experts, reduced by ExpertGradSync).
    `reduce_dtype`: gradients' dtype on the wire (default fp32); `reduce_scatter`: a custom
    ReduceScatter comm (grad_compression.counting_reduce_scatter) installed on every FSDP module."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                              reduce_dtype=reduce_dtype or (torch.float32 if bf16 else None))
    modules = list(model.layers.values()) + [model]
    for module in modules:
        fully_shard(module, mesh=dp_mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp,
                    ignored_params=ignored)
        if reduce_scatter is not None:
            module.set_custom_reduce_scatter(reduce_scatter)


def fsdp_mesh(dims: ParallelDims, mesh):
    """The mesh FSDP2 reduces gradients over: dp, and with cp > 1 also cp (cp ranks hold the same
    parameters and see different tokens). dp x cp goes in as a 2-D (replicate over dp, shard over
    cp) mesh: gradients are averaged over both, parameters sharded over cp."""
    if dims.cp > 1:
        return mesh["cp"] if dims.dp == 1 else mesh["dp_shard", "cp"]
    return mesh["dp_shard"] if dims.dp_replicate == 1 else mesh["dp_replicate", "dp_shard"]


def apply_cp(model: Transformer, group, cp: int, cp_rank: int) -> None:
    """Ring attention in every block; the trainer feeds this rank's zigzag slice of each sequence."""
    from wanka.train.ring_attention import Ring

    ring = Ring(group, cp, cp_rank)
    for block in model.layers.values():
        block.attention.ring = ring


def apply_fp8(model: nn.Module) -> None:
    """Float8 training with torchao (dynamic tensorwise scaling); CUDA (Hopper or newer) only."""
    if not torch.cuda.is_available():
        raise SpecError("layout.precision", "bf16 or fp32 on CPU (fp8 needs a CUDA GPU)", "fp8")
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(model, module_filter_fn=lambda m, fqn: fqn != "output")


def stage_ranges(layers: int, stages: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges, earlier stages taking the remainder."""
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append((start, start + n))
        start += n
    return out


@dataclass
class Parallelized:
    """What the trainer drives: model chunks this rank owns and, with pp > 1, a schedule."""

    chunks: list[Transformer]
    schedule: object | None
    mesh: object | None
    has_last_stage: bool


def parallelize(spec, dims: ParallelDims, seed: int, pp_schedule: str | None = None, compile_: bool = False,
                rank: int = 0, mesh=None, placements: dict | None = None, fsdp: bool = True,
                reduce_dtype: torch.dtype | None = None, reduce_scatter=None) -> Parallelized:
    """`placements` (with ep > 1): global MoE layer index -> experts.Placement; this rank keeps the
    experts placement.ranks[ep_rank] of each layer. `fsdp=False`: the trainer wraps in DDP instead.
    `reduce_dtype`, `reduce_scatter`: FSDP2's gradient reduction (see apply_fsdp)."""
    layout = dims.layout  # already validated by ParallelDims.from_layout
    coords = dims.coords(rank)
    n_stages = dims.pp * layout.vpp
    stage_ids = [coords["pp"] + k * dims.pp for k in range(layout.vpp)]  # looped placement for interleaving
    ranges = stage_ranges(spec.layers, n_stages)
    chunks = []
    for s in stage_ids:
        model = build_model(spec, seed).to(_device())
        if n_stages > 1:
            model.keep_stage(*ranges[s], is_first=s == 0, is_last=s == n_stages - 1)
        ignored = None
        if placements is not None:
            for k, moe in model.moe_layers().items():
                moe.keep_experts(placements[int(k)].ranks[dims.ep_rank(rank)])
            ignored = {p for moe in model.moe_layers().values() for p in moe.experts.parameters()}
        if layout.precision == "fp8":
            apply_fp8(model)
        if dims.tp > 1:
            apply_tp(model, mesh["tp"], layout.sequence_parallel)
        apply_ac(model, layout.recompute)
        if compile_:
            apply_compile(model)
        if dims.cp > 1:
            apply_cp(model, mesh["cp"].get_group(), dims.cp, coords["cp"])
        if fsdp and dims.dp * dims.cp > 1:
            dp_mesh = fsdp_mesh(dims, mesh)
            apply_fsdp(model, dp_mesh, reshard_after_forward=layout.zero == 3, bf16=layout.precision == "bf16",
                       ignored=ignored, reduce_dtype=reduce_dtype, reduce_scatter=reduce_scatter)
        chunks.append(model)
    schedule = None
    if dims.pp > 1:
        schedule = build_schedule(chunks, stage_ids, n_stages, mesh["pp"].get_group(), layout, pp_schedule)
    return Parallelized(chunks, schedule, mesh, has_last_stage=(n_stages - 1) in stage_ids)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


def check_pp_schedule(name: str | None, layout) -> str:
    """The schedule to use: 1f1b by default, interleaved when vpp > 1 (and only then)."""
    name = name or ("interleaved" if layout.vpp > 1 else "1f1b")
    if name not in PP_SCHEDULES:
        raise SpecError("pp-schedule", " | ".join(PP_SCHEDULES), name)
    if (name == "interleaved") != (layout.vpp > 1):
        raise SpecError("pp-schedule", "interleaved exactly when the layout's vpp > 1", name)
    return name


def build_schedule(chunks, stage_ids, n_stages, pp_group, layout, name: str | None):
    """GPipe (Huang et al. 2019), 1F1B (PipeDream-Flush, Narayanan et al. 2021 arXiv:2104.04473
    section 2.2) or interleaved 1F1B (same paper, section 2.2.2) from torch.distributed.pipelining."""
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    name = check_pp_schedule(name, layout)
    n_micro = layout.microbatches
    device = _device()
    stages = [_stage_class()(c, s, n_stages, device, group=pp_group) for c, s in zip(chunks, stage_ids)]
    if name == "interleaved":
        return ScheduleInterleaved1F1B(stages, n_micro, loss_fn=cross_entropy)
    cls = ScheduleGPipe if name == "gpipe" else Schedule1F1B
    return cls(stages[0], n_micro, loss_fn=cross_entropy)


def _stage_class():
    """PipelineStage whose shape-inference forward (torch 2.13 stage.py `_forward_metadata_inference`
    runs the stage once on placeholder tensors before the first step) is not counted in the MoE
    layers' expert-load statistics, so they equal an unpipelined run's."""
    from torch.distributed.pipelining import PipelineStage

    class Stage(PipelineStage):
        def _forward_metadata_inference(self, *args, **kwargs):
            layers = self.submod.moe_layers().values()
            for moe in layers:
                moe.recording = False
            try:
                return super()._forward_metadata_inference(*args, **kwargs)
            finally:
                for moe in layers:
                    moe.recording = True

    return Stage


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
