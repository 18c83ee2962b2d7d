"""Uneven pipeline stages and multi-token prediction (MTP).

Megatron-Core's ``pipeline_model_parallel_layout`` places every piece of the model on a named virtual
stage: 'E' embedding, 't' decoder layer, 'm' MTP layer, 'L' loss (output layer + cross entropy),
'|' ends a virtual stage, 'x*n' and '(...)*n' repeat (megatron/core/transformer/pipeline_parallel_layer_layout.py,
PipelineParallelLayerLayout.from_str). Virtual stage v runs on pipeline rank v % pp (the interleaved
schedule's round robin), so rank r holds stages r, r + pp, r + 2 pp, ...

Megatron-Bridge's DeepSeek-V3 recipes use it to give the last stage fewer decoder layers, because it
also carries the MTP layer and the output layer: src/megatron/bridge/recipes/deepseek/deepseek_v3.py
@v0.4.0 set_deepseek_v3_pipeline_model_parallel_layout, (4,4)/(8,2)/(16,1): [E + 4 t], 14 x [4 t],
[t + m + L]; v0.1.0rc3 scripts/performance/run_script.py: "Et|(tt|)*30mL".

An MTP module (Megatron-Core MultiTokenPredictionLayer, DeepSeek-V3 report s.2.2) is one transformer
layer of the decoder's last kind (Megatron-Bridge training/utils/flop_utils.py@v0.2.0 counts it as
`last_layer_is_moe * mtp_num_layers` MoE layers) plus a second pass through the shared output layer and
loss; its eh_proj (2h -> h) and two RMSNorms are not priced (about 0.2% of DeepSeek-V3's FLOPs per
token: 2 * 2 * 7168^2 * 3 / 260e9).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from wanka.errors import SpecError


@dataclass(frozen=True)
class RankPieces:
    dense: int  # decoder layers of the dense kind (the model's first ones)
    moe: int
    mtp: int  # MTP layers (each: a decoder layer of the last kind + an output-layer pass)
    loss: bool  # the output layer and loss


def _expand(text: str) -> str:
    """Unroll '(...)*n' and 'x*n' repeats."""
    s = text.replace(" ", "")
    paren = re.compile(r"\(([^()]*)\)\*(\d+)")
    while paren.search(s):
        s = paren.sub(lambda mt: mt.group(1) * int(mt.group(2)), s)
    return re.sub(r"([EtmL])\*(\d+)", lambda mt: mt.group(1) * int(mt.group(2)), s)


@lru_cache(maxsize=256)
def virtual_stages(text: str) -> tuple[str, ...]:
    """The layout string as one string of pieces per virtual stage ('Et', 'tt', 'mL', ...)."""
    s = _expand(text)
    if not s or set(s) - set("EtmL|"):
        raise SpecError("options.pp_layout", "a Megatron-Core layout of E, t, m, L, |, (...)*n", text)
    return tuple(s.split("|"))


def rank_pieces(text: str, pp: int, dense_total: int) -> tuple[RankPieces, ...]:
    """What each pipeline rank runs; the first `dense_total` decoder layers are dense."""
    stages = virtual_stages(text)
    if len(stages) % pp:
        raise SpecError("options.pp_layout", f"a multiple of pp ({pp}) virtual stages", len(stages))
    seen, out = 0, [[0, 0, 0, False] for _ in range(pp)]
    for v, st in enumerate(stages):
        r = out[v % pp]
        for piece in st:
            if piece == "t":
                r[0 if seen < dense_total else 1] += 1
                seen += 1
            elif piece == "m":
                r[2] += 1
            elif piece == "L":
                r[3] = True
    return tuple(RankPieces(*r) for r in out)


def check_layers(text: str, pp: int, vpp: int, layers: int) -> None:
    """The layout must hold every decoder layer once and pp x vpp virtual stages."""
    stages = virtual_stages(text)
    n = sum(st.count("t") for st in stages)
    if n != layers or len(stages) != pp * vpp:
        raise SpecError("options.pp_layout", f"{layers} decoder layers over {pp * vpp} virtual stages",
                        f"{n} over {len(stages)}")


def stage_pieces(model, lay, opts) -> tuple[tuple[int, int, bool, int], ...]:
    """(dense, MoE, output layer + loss, MTP modules) per pipeline rank: from Options.pp_layout where
    the run states one, else the even split (memory.stage_layers) with the MTP modules on the last rank."""
    from wanka.plan.memory import stage_layers

    if opts.pp_layout:
        check_layers(opts.pp_layout, lay.pp, lay.vpp, model.layers)
        return tuple((r.dense, r.moe, r.loss, r.mtp)
                     for r in rank_pieces(opts.pp_layout, lay.pp, model.layers - model.moe_layers))
    last = lay.pp - 1
    return tuple(stage_layers(model, lay.pp, i) + (i == last, opts.mtp_layers if i == last else 0)
                 for i in range(lay.pp))
