"""Parameter counts of a decoder-only transformer (dense, MoE, GQA, MLA).

Counts follow the tensors of the export format (Llama-style, no biases; the shapes are
`wanka.serve.export.expected_shapes`, described in docs/serve.md "Export directory") plus biases and LayerNorm
shifts for GPT-style models (norm: layernorm), as in Megatron GPT (Narayanan et al. SC'21,
section 5.1: P = 12 l h^2 (1 + 13/12h + (V+s)/12lh), learned position embeddings excluded here).
MLA shapes: DeepSeek-V3 technical report (arXiv:2412.19437) section 2.1.1.
"""

from __future__ import annotations

from dataclasses import dataclass

from wanka.workload.spec import ModelSpec


def attention_params(m: ModelSpec) -> int:
    h, hd = m.hidden, m.head_dim_
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        return (h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.heads * qk  # q down, norm, up
                + h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank  # kv down (+ shared rope key), norm
                + a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim)  # kv up
                + m.heads * a.v_head_dim * h)  # output
    q, kv = m.heads * hd, m.kv_heads_ * hd
    bias = (q + 2 * kv + h) if m.norm == "layernorm" else 0
    return h * q + 2 * h * kv + q * h + bias


def mlp_params(m: ModelSpec, ffn: int) -> int:
    mats = 3 if m.activation == "swiglu" else 2
    bias = (ffn + m.hidden) if m.norm == "layernorm" else 0
    return mats * m.hidden * ffn + bias


def norm_params(m: ModelSpec) -> int:
    return (2 if m.norm == "layernorm" else 1) * m.hidden


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by where they live (totals over the whole model)."""

    embedding: int  # input embedding table
    output: int  # output projection (0 when tied)
    dense_layers: int  # attention + norms of every layer + dense MLPs
    shared_experts: int  # shared-expert MLPs of the MoE layers
    routed_experts: int  # all routed experts (sharded by expert parallelism)
    router: int
    active_routed: int  # routed-expert parameters one token uses (top_k of them)

    @property
    def total(self) -> int:
        return self.embedding + self.output + self.dense_layers + self.shared_experts + self.routed_experts + self.router

    @property
    def active(self) -> int:
        """Parameters one token touches (MoE: top_k routed experts)."""
        return self.total - self.routed_experts + self.active_routed

    @property
    def non_expert(self) -> int:
        return self.total - self.routed_experts


def param_counts(m: ModelSpec) -> ParamCounts:
    per_layer = attention_params(m) + 2 * norm_params(m)
    moe_layers = m.moe_layers
    dense_mlp = (m.layers - moe_layers) * mlp_params(m, m.ffn_hidden)
    shared = routed = router = active = 0
    if m.moe is not None:
        expert = mlp_params(m, m.moe.ffn_hidden)
        shared = moe_layers * m.moe.shared_experts * expert
        routed = moe_layers * m.moe.experts * expert
        router = moe_layers * m.moe.experts * m.hidden
        active = moe_layers * m.moe.top_k * expert
    return ParamCounts(
        embedding=m.vocab * m.hidden,
        output=0 if m.tied_embeddings else m.vocab * m.hidden,
        dense_layers=m.layers * per_layer + dense_mlp + norm_params(m),
        shared_experts=shared,
        routed_experts=routed,
        router=router,
        active_routed=active,
    )
