"""FLOPs of one token through the model: GEMM shapes, attention core, recompute.

A GEMM of (M x K) by (K x N) costs 2MNK FLOPs (forward); backward costs twice the forward (input
and weight gradients). The attention core (QK^T and AV) costs 2 * s * heads * (d_qk + d_v) per
token per layer counted over the full s x s score matrix, as PaLM (Chowdhery et al. 2022,
appendix B: 6N + 12 L H Q T) and Megatron (Narayanan et al. SC'21 eq. 3) count it. A causal
kernel (FlashAttention) executes about half of it; that is an execution detail (wanka.plan.compute),
not part of the model FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from wanka.workload.params import param_counts
from wanka.workload.spec import ModelSpec


@dataclass(frozen=True)
class Gemm:
    name: str
    k: int  # contraction dimension
    n: int  # output features
    tp_split: str  # "n" (column parallel), "k" (row parallel) or "none" (replicated)
    per_token: float = 1.0  # how many times a token passes (MoE: top_k routed copies)
    expert: bool = False  # a routed-expert GEMM (sharded by expert parallelism)


def attention_gemms(m: ModelSpec) -> list[Gemm]:
    h = m.hidden
    if m.mla is not None:
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        return [Gemm("q_down", h, a.q_lora_rank, "none"), Gemm("q_up", a.q_lora_rank, m.heads * qk, "n"),
                Gemm("kv_down", h, a.kv_lora_rank + a.qk_rope_head_dim, "none"),
                Gemm("kv_up", a.kv_lora_rank, m.heads * (a.qk_nope_head_dim + a.v_head_dim), "n"),
                Gemm("attn_out", m.heads * a.v_head_dim, h, "k")]
    hd = m.head_dim_
    return [Gemm("qkv", h, (m.heads + 2 * m.kv_heads_) * hd, "n"), Gemm("attn_out", m.heads * hd, h, "k")]


def mlp_gemms(m: ModelSpec, ffn: int, per_token: float = 1.0, expert: bool = False, tag: str = "mlp") -> list[Gemm]:
    up = 2 * ffn if m.activation == "swiglu" else ffn  # gate and up fused
    return [Gemm(f"{tag}_up", m.hidden, up, "n", per_token, expert), Gemm(f"{tag}_down", ffn, m.hidden, "k", per_token, expert)]


def layer_gemms(m: ModelSpec, moe_layer: bool) -> list[Gemm]:
    out = attention_gemms(m)
    if moe_layer and m.moe is not None:
        out.append(Gemm("router", m.hidden, m.moe.experts, "none"))
        if m.moe.shared_experts:
            out += mlp_gemms(m, m.moe.shared_experts * m.moe.ffn_hidden, tag="shared")
        out += mlp_gemms(m, m.moe.ffn_hidden, per_token=m.moe.top_k, expert=True, tag="expert")
    else:
        out += mlp_gemms(m, m.ffn_hidden)
    return out


def head_gemm(m: ModelSpec) -> Gemm:
    return Gemm("output", m.hidden, m.vocab, "n")


def attention_dims(m: ModelSpec) -> tuple[int, int]:
    """(d_qk, d_v) per head."""
    if m.mla is not None:
        return m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
    return m.head_dim_, m.head_dim_


def attention_core_flops_per_token(m: ModelSpec, seq_len: int) -> float:
    """Forward QK^T + AV FLOPs per token per layer, full (non-causal) s x s count."""
    d_qk, d_v = attention_dims(m)
    return 2.0 * seq_len * m.heads * (d_qk + d_v)


def causal_pair_fraction(seq_len: int, window: int | None) -> float:
    """Share of the s x s (query, key) pairs a causal mask computes: 1/2 without a window (the
    FlashAttention convention; exactly (s + 1) / 2s); with a sliding window w < s,
    sum_q min(q + 1, w) / s^2 = (w s - w (w - 1) / 2) / s^2."""
    s = float(seq_len)
    if window is None or window >= seq_len:
        return 0.5
    w = float(window)
    return (w * s - w * (w - 1) / 2) / (s * s)


def windowed_layer_share(m: ModelSpec) -> float:
    """Share of the layers with the sliding window: all when ModelSpec.full_attention_every is None,
    else the layers whose 1-based number is not a multiple of it (Megatron-Core
    transformer/utils.is_layer_window_attention: layer_number % window_attn_skip_freq != 0)."""
    if m.sliding_window is None:
        return 0.0
    n = m.full_attention_every
    return 1.0 if n is None else (m.layers - m.layers // n) / m.layers


def matmul_params_active(m: ModelSpec) -> int:
    """Parameters in GEMMs one token uses: active parameters less the input embedding (a lookup)
    and the norm weights, plus the output projection when it is tied (its GEMM still runs)."""
    pc = param_counts(m)
    norms = (2 * m.layers + 1) * m.hidden * (2 if m.norm == "layernorm" else 1)
    tied = m.vocab * m.hidden if m.tied_embeddings else 0
    return pc.active - pc.embedding - norms + tied


@dataclass(frozen=True)
class TokenFlops:
    forward: float
    backward: float
    recompute_full: float  # extra forward of every layer (full activation recompute)
    recompute_selective: float  # extra forward of the attention core only

    def total(self, recompute: str = "none") -> float:
        extra = {"none": 0.0, "selective": self.recompute_selective, "full": self.recompute_full}[recompute]
        return self.forward + self.backward + extra


def token_flops(m: ModelSpec, seq_len: int | None = None) -> TokenFlops:
    s = seq_len or m.seq_len
    attn = m.layers * attention_core_flops_per_token(m, s)
    fwd = 2.0 * matmul_params_active(m) + attn
    head = 2.0 * m.vocab * m.hidden
    return TokenFlops(forward=fwd, backward=2 * fwd, recompute_full=fwd - head, recompute_selective=attn)


def model_flops_per_token(m: ModelSpec, seq_len: int | None = None) -> float:
    """FLOPs per token for MFU: 6 * N + 6 * L * s * heads * (d_qk + d_v), no recompute.

    N = active parameters in GEMMs (no input embedding, no norms, output projection included).
    For standard attention (d_qk = d_v = head_dim) the second term is PaLM's 12 * L * H * Q * T.
    """
    return token_flops(m, seq_len).total("none")


def alternate_matmul_fraction(m: ModelSpec) -> float:
    """Share of a dense block's matmul FLOPs that torchtitan's per-op selective checkpointing
    recomputes: the 2nd, 4th and 6th matmuls of wq wk wv wo w1 w3 w2 (wk, wo, w3; parallelize_llama.py
    `_get_custom_policy`: an aten.mm output is saved unless its count in the block is even).
    SwiGLU blocks only (torchtitan's Llama); a GELU MLP (w1, w2) recomputes wk and wo."""
    h, hd = m.hidden, m.head_dim_
    q, kv, o = m.heads * hd * h, m.kv_heads_ * hd * h, m.heads * hd * h
    ffn = m.ffn_hidden * h
    if m.activation == "swiglu":
        return (kv + o + ffn) / (q + 2 * kv + o + 3 * ffn)
    return (kv + o) / (q + 2 * kv + o + 2 * ffn)

