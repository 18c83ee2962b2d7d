"""Activation memory of one transformer layer for one micro-batch (bytes).

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
section 4: a GPT layer stores s*b*h*(34 + 5*a*s/h) bytes; with tensor parallelism t (no sequence
parallelism) s*b*h*(10 + 24/t + 5*a*s/(h*t)); with sequence parallelism s*b*h/t*(34 + 5*a*s/h);
selective recompute (attention core recomputed) drops the 5*a*s/h term; full recompute keeps only
the layer input, 2*s*b*h (/t with sequence parallelism). We rebuild those terms item by item so
they extend to GQA (K, V of kv_heads), SwiGLU (gate, up, product), MLA, MoE (top_k routed copies),
models without dropout (Llama-style) and FlashAttention, which stores no s x s matrix (only the
output and its log-sum-exp statistics; Dao et al. 2022).

Finer selective recompute (`modules`, the names of Megatron-Core's --recompute-modules):
  core_attn    the s x s scores/softmax/dropout (the classic selective recompute; nothing to drop
               with FlashAttention)
  layernorm    norm outputs are recomputed from their inputs (DeepSeek-V3 s.3.2.3 "Recomputation
               of RMSNorm"); the norm inputs stay
  mla_up_proj  MLA's up-projected Q, K, V (and RoPE) are recomputed from the cached latents
               (DeepSeek-V3 s.3.2.3 "... and MLA Up-Projection")
  moe_act      the routed experts' SwiGLU output is recomputed; only its inputs are cached
               (DeepSeek-V3 s.3.3.2 "Inputs of the SwiGLU operator in MoE")
  mlp          the dense MLP is recomputed from its input (Megatron-Core --recompute-modules mlp;
               MaxText remat policies that save only the attention projections)
  alternate_matmuls  torchtitan's per-op selective checkpointing (parallelize_llama.py
               `_save_list` and `_custom_policy`, selective_ac_option "op", @9dec370ad26b and
               @e7c0cae934df): inside a block only the outputs of the ops in `_save_list` are kept
               (MUST_SAVE) -- aten.mm except every second one (wk, wo, w3 in the call order wq wk wv
               wo w1 w3 w2 recomputed; wq, wv, w1, w2 kept), the SDPA kernels' output and
               log-sum-exp, reduce-scatter outputs, and the float8 amax scalars -- and everything else
               (norms, RoPE, SiLU, products, casts) is recomputed (PREFER_RECOMPUTE) from them and from
               the block input the checkpoint wrapper keeps. Dense layers with fused attention; an MoE
               or MLA layer keeps the plain selective count. Not counted: the reduce-scatter outputs
               under TP (at most 4h/tp per token); w2's output, a row-parallel partial sum of the full
               hidden width, is divided by tp under sequence parallelism like the norm inputs (an
               undercount by (tp-1)/tp of 2h per token there)
  out_proj     the attention output projection is recomputed (MaxText's checkpoint name "out_proj":
               remat policies that do not list it, e.g. save_qkv_proj = save_only_these_names(
               "query_proj", "value_proj", "key_proj", "qkv_proj"), AI-Hypercomputer/maxtext
               MaxText/layers/models.py@b5a0344 Decoder.get_remat_policy); time and
               FLOPs only, its output (the residual branch) is not stored by the memory model anyway
FP8 activation caching (`fp8`): inputs of FP8 GEMMs are cached in FP8, 1 byte (DeepSeek-V3 s.3.3.2
"we cache the activations in FP8 format for the Linear operator's backward pass"; Transformer
Engine likewise saves the FP8-cast input of an FP8 Linear for its weight gradient): norm outputs,
the MLP activation output, the dispatched expert inputs, and (with moe_act) the SwiGLU inputs of
the experts. The attention output stays 16-bit (FlashAttention's backward reads it; DeepSeek
uses a 12-bit E5M6 there, which we do not model).

Dropout: GPT-style models (norm: layernorm) follow Megatron's default dropout 0.1 (1-byte masks);
Llama-style models (rmsnorm) train without dropout. This inference is an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass

from wanka.workload.flops import attention_dims
from wanka.workload.spec import ModelSpec

RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "alternate_matmuls", "out_proj")


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
                      attention: str = "flash", modules: tuple[str, ...] = (), fp8: bool = False) -> LayerActivations:
    """`seq_len` is the sequence share of this GPU (s / cp). `modules` are the extra selective-
    recompute modules (beyond the attention core, which `stored(..., "selective")` drops);
    `fp8` caches FP8 GEMM inputs in 1 byte."""
    sb = float(seq_len * micro_batch)
    h = m.hidden
    if "alternate_matmuls" in modules and not moe_layer and m.mla is None and attention != "unfused":
        return _per_op_sac(m, sb)
    drop = 1.0 if uses_dropout(m) else 0.0
    g_in = 1 if fp8 else 2  # bytes of a cached GEMM input
    norm_out = 0 if "layernorm" in modules else g_in * h
    d_qk, d_v = attention_dims(m)
    q = m.heads * d_qk
    k = (m.heads if m.mla else m.kv_heads_) * d_qk
    v = (m.heads if m.mla else m.kv_heads_) * d_v
    # attention block: norm input 2sbh + its output (QKV input) [replicated], Q, K, V [split],
    # output-projection input (heads * d_v) [split], dropout mask sbh [replicated]
    repl = 2 * h + norm_out + drop * h
    qkv = 0 if (m.mla is not None and "mla_up_proj" in modules) else 2 * (q + k + v)
    split = qkv + 2 * m.heads * d_v
    if m.mla is not None:  # latent down-projections are stored too (replicated under TP)
        repl += 2 * (m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
    # MLP block: norm input 2sbh + output (MLP input) [replicated], internals [split], dropout mask
    repl += 2 * h + norm_out + drop * h
    ffn_items = 0.0 if "mlp" in modules else _mlp_items(m, m.ffn_hidden, g_in)
    if moe_layer and m.moe is not None:
        f = m.moe.ffn_hidden
        routed = _mlp_items(m, f, g_in, recompute_act="moe_act" in modules, fp8=fp8)
        ffn_items = m.moe.top_k * (routed + g_in * h) + m.moe.shared_experts * _mlp_items(m, f, g_in)
        repl += 4 * m.moe.experts  # router logits (fp32)
    split += ffn_items
    scores = 0.0
    if attention == "unfused":  # softmax output 2as^2b, dropout mask as^2b, dropout output 2as^2b
        scores = (2 + 3 * drop) * m.heads * seq_len * sb
    else:  # FlashAttention keeps the output (counted above) and fp32 log-sum-exp per head
        split += 4 * m.heads
    return LayerActivations(replicated=repl * sb, tp_split=split * sb, scores=scores, layer_input=2 * h * sb)


def _per_op_sac(m: ModelSpec, sb: float) -> LayerActivations:
    """A dense block under torchtitan's per-op selective checkpointing (module docstring,
    alternate_matmuls): 16-bit block input and outputs of wq, wv, w1 (the gate of a SwiGLU, the
    up projection of a GELU MLP) and w2, the attention output and its fp32 log-sum-exp per head."""
    h = m.hidden
    d_qk, d_v = attention_dims(m)
    wq, wv = 2 * m.heads * d_qk, 2 * m.kv_heads_ * d_v
    split = wq + wv + 2 * m.heads * d_v + 4 * m.heads + 2 * m.ffn_hidden
    return LayerActivations(replicated=(2 * h + 2 * h) * sb, tp_split=split * sb, scores=0.0, layer_input=2 * h * sb)


def _mlp_items(m: ModelSpec, ffn: int, g_in: int = 2, recompute_act: bool = False, fp8: bool = False) -> float:
    """Cached MLP internals per token: the activation function's input(s) and its output (the
    down-projection's input, a GEMM input). With `recompute_act` the output is recomputed and the
    inputs are cached in FP8 under `fp8` (DeepSeek-V3 s.3.3.2)."""
    act_in = 2 * ffn if m.activation == "swiglu" else ffn  # gate and up, or the GELU input
    act_in_bytes = (1 if fp8 and recompute_act else 2) * act_in
    return act_in_bytes + (0 if recompute_act else g_in * ffn)


def logits_bytes(m: ModelSpec, micro_batch: int, seq_len: int, tp: int) -> float:
    """fp32 logits of the output layer and their gradient buffer (last pipeline stage)."""
    return 4.0 * micro_batch * seq_len * m.vocab / tp * 2
