"""Activation memory of one transformer layer for one micro-batch (bytes, 16-bit activations).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
section 4: a GPT layer stores s*b*h*(34 + 5*a*s/h) bytes; with tensor parallelism t (no sequence
parallelism) s*b*h*(10 + 24/t + 5*a*s/(h*t)); with sequence parallelism s*b*h/t*(34 + 5*a*s/h);
selective recompute (attention core recomputed) drops the 5*a*s/h term; full recompute keeps only
the layer input, 2*s*b*h (/t with sequence parallelism). We rebuild those terms item by item so
they extend to GQA (K, V of kv_heads), SwiGLU (gate, up, product), MLA, MoE (top_k routed copies),
models without dropout (Llama-style) and FlashAttention, which stores no s x s matrix (only the
output and its log-sum-exp statistics; Dao et al. 2022).

Dropout: GPT-style models (norm: layernorm) follow Megatron's default dropout 0.1 (1-byte masks);
Llama-style models (rmsnorm) train without dropout. This inference is an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

from wanka.workload.flops import attention_dims
from wanka.workload.spec import ModelSpec


def uses_dropout(m: ModelSpec) -> bool:
    return m.norm == "layernorm"


@dataclass(frozen=True)
class LayerActivations:
    """Bytes per layer per micro-batch on one GPU, split by how they shard."""

    replicated: float  # not split by TP unless sequence parallelism (norm inputs, dropout masks ...)
    tp_split: float  # split by TP (Q, K, V, MLP internals ...)
    scores: float  # s x s attention scores, softmax, dropout (unfused attention only)
    layer_input: float  # what full recompute keeps

    def stored(self, tp: int, sp: bool, recompute: str) -> float:
        if recompute == "full":
            return self.layer_input / (tp if sp else 1)
        base = (self.replicated / (tp if sp else 1)) + self.tp_split / tp
        return base if recompute == "selective" else base + self.scores / tp


def layer_activations(m: ModelSpec, micro_batch: int, seq_len: int, moe_layer: bool = False,
                      attention: str = "flash") -> LayerActivations:
    """`seq_len` is the sequence share of this GPU (s / cp)."""
    sb = float(seq_len * micro_batch)
    h = m.hidden
    drop = 1.0 if uses_dropout(m) else 0.0
    d_qk, d_v = attention_dims(m)
    q = m.heads * d_qk
    k = (m.heads if m.mla else m.kv_heads_) * d_qk
    v = (m.heads if m.mla else m.kv_heads_) * d_v
    # attention block: LN output (QKV input) 2sbh [replicated], Q, K, V [split], output-projection
    # input (heads * d_v) [split], dropout mask sbh [replicated]
    repl = 2 * h + drop * h
    split = 2 * (q + k + v) + 2 * m.heads * d_v
    if m.mla is not None:  # latent down-projections are stored too (replicated under TP)
        repl += 2 * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    # MLP block: input 2sbh [replicated], internals [split], dropout mask sbh [replicated]
    repl += 2 * h + drop * h
    ffn_items = _mlp_items(m, m.ffn_hidden)
    if moe_layer and m.moe is not None:
        f = m.moe.ffn_hidden
        ffn_items = m.moe.top_k * (_mlp_items(m, f) + 2 * h) + m.moe.shared_experts * _mlp_items(m, f)
        repl += 4 * m.moe.experts  # router logits (fp32)
    split += ffn_items
    # two norm inputs, 2sbh each [replicated]
    repl += 4 * h
    scores = 0.0
    if attention == "unfused":  # softmax output 2as^2b, dropout mask as^2b, dropout output 2as^2b
        scores = (2 + 3 * drop) * m.heads * seq_len * sb
    else:  # FlashAttention keeps the output (counted above) and fp32 log-sum-exp per head
        split += 4 * m.heads
    return LayerActivations(replicated=repl * sb, tp_split=split * sb, scores=scores, layer_input=2 * h * sb)


def _mlp_items(m: ModelSpec, ffn: int) -> float:
    if m.activation == "swiglu":  # gate and up outputs (activation inputs) and the product
        return 2 * 2 * ffn + 2 * ffn
    return 2 * ffn + 2 * ffn  # GELU input 8sbh and output 8sbh for ffn = 4h


def logits_bytes(m: ModelSpec, micro_batch: int, seq_len: int, tp: int) -> float:
    """fp32 logits of the output layer and their gradient buffer (last pipeline stage)."""
    return 4.0 * micro_batch * seq_len * m.vocab / tp * 2
