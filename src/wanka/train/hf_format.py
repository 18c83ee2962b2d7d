"""wanka <-> Hugging Face Transformers: config.json fields and tensor names (Llama, Mixtral, Qwen2-MoE).

wanka's decoder (model/decoder.py) already uses the Hugging Face math, so the conversion is a renaming
and no tensor is permuted:
- RoPE: wanka rotates the split halves (pair j with j + head_dim/2, rotate_half) with
  freq_j = theta^(-2j/head_dim), as `transformers/models/llama/modeling_llama.py` (rotate_half,
  rope_type "default") does. Meta's original Llama checkpoints interleave pairs instead; HF permutes
  wq/wk on import (convert_llama_weights_to_hf.py) - wanka's weights are already in HF's layout.
- RMSNorm in fp32 then times the weight (LlamaRMSNorm); eps is config.rms_norm_eps.
- GQA: query head h reads kv head h // (heads/kv_heads) (repeat_kv there, repeat_interleave here).
- MoE routing: softmax over all experts in fp32, top-k, renormalise the k weights
  (MixtralSparseMoeBlock; Qwen2MoeTopKRouter with norm_topk_prob=true).

Architectures:
- dense SwiGLU            -> LlamaForCausalLM
- MoE, no dense layers, no shared experts -> MixtralForCausalLM (Jiang et al. 2024, arXiv:2401.04088)
- MoE with leading dense layers or shared experts -> Qwen2MoeForCausalLM: `mlp_only_layers` holds
  the dense layers; its shared expert is gated by sigmoid(shared_expert_gate x), which wanka does not
  have, so the export writes a zero gate (sigmoid(0) = 0.5 exactly) and doubles down_proj - both
  exact in floating point (a power-of-two scale), so the product equals wanka's ungated shared expert.
  Without shared experts the Qwen2-MoE block still builds one: it gets intermediate size 1 and zero
  weights, whose output is exactly 0.
- GELU feed-forwards (no up projection) have no HF Llama-family equivalent: refused.
Expert tensors use the per-expert names of the published Mixtral-8x7B / Qwen1.5-MoE checkpoints,
which transformers fuses on load (transformers/conversion_mapping.py, "mixtral" and "qwen2_moe").
"""

from __future__ import annotations

import torch

from wanka.errors import SpecError
from wanka.workload.spec import ModelSpec, parse_model_spec

LLAMA, MIXTRAL, QWEN2_MOE = "LlamaForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM"
_MODEL_TYPE = {LLAMA: "llama", MIXTRAL: "mixtral", QWEN2_MOE: "qwen2_moe"}
_ATTN = {"attention.wq": "self_attn.q_proj", "attention.wk": "self_attn.k_proj", "attention.wv": "self_attn.v_proj",
         "attention.wo": "self_attn.o_proj", "attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
_FFN = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}  # SwiGLU: w2(silu(w1 x) * w3 x)


def architecture(spec: ModelSpec) -> str:
    """The HF architecture that computes exactly what wanka computes for `spec`, or a SpecError."""
    if spec.activation != "swiglu":
        raise SpecError("model.activation", "swiglu for --format hf (Llama-family MLPs are gated; a GELU "
                        "feed-forward without up projection has no HF Llama/Mixtral equivalent)", spec.activation)
    if spec.norm != "rmsnorm" or spec.mla is not None:
        raise SpecError("model", "an rmsnorm model without mla for --format hf", spec.name)
    if spec.moe is None:
        return LLAMA
    if spec.moe.dense_layers == 0 and spec.moe.shared_experts == 0:
        return MIXTRAL
    return QWEN2_MOE


def hf_config(spec: ModelSpec, bos_id: int, eos_id: int) -> dict:
    """config.json for `spec` (the fields of LlamaConfig / MixtralConfig / Qwen2MoeConfig)."""
    arch = architecture(spec)
    cfg = {
        "architectures": [arch], "model_type": _MODEL_TYPE[arch], "vocab_size": spec.vocab,
        "hidden_size": spec.hidden, "intermediate_size": spec.ffn_hidden, "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads, "num_key_value_heads": spec.kv_heads_, "head_dim": spec.head_dim_,
        "hidden_act": "silu", "max_position_embeddings": spec.seq_len, "rms_norm_eps": spec.norm_eps,
        # transformers >= 5 reads rope_parameters; 4.x reads rope_theta: write both.
        "rope_theta": spec.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
        "tie_word_embeddings": spec.tied_embeddings, "attention_bias": False, "attention_dropout": 0.0,
        "initializer_range": 0.02, "bos_token_id": bos_id, "eos_token_id": eos_id, "torch_dtype": "float32",
        "use_cache": True, "wanka_model_name": spec.name,
    }
    moe = spec.moe
    if arch == LLAMA:
        cfg["mlp_bias"] = False
    elif arch == MIXTRAL:
        cfg.update(num_local_experts=moe.experts, num_experts_per_tok=moe.top_k, intermediate_size=moe.ffn_hidden,
                   router_aux_loss_coef=0.01, output_router_logits=False, sliding_window=None)
    else:
        cfg.update(num_experts=moe.experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe.ffn_hidden,
                   shared_expert_intermediate_size=max(1, moe.shared_experts * moe.ffn_hidden),
                   mlp_only_layers=list(range(moe.dense_layers)), decoder_sparse_step=1, norm_topk_prob=True,
                   qkv_bias=False, use_sliding_window=False, sliding_window=None, router_aux_loss_coef=0.01,
                   output_router_logits=False, wanka_shared_experts=moe.shared_experts)
    return cfg


def spec_from_hf_config(cfg: dict, name: str, source: str) -> ModelSpec:
    """The ModelSpec a HF config.json describes; anything wanka cannot compute exactly -> SpecError."""
    arch = (cfg.get("architectures") or [None])[0]
    if arch not in _MODEL_TYPE:
        raise SpecError("architectures", f"one of {sorted(_MODEL_TYPE)}", arch, source=source)

    def need(key: str):
        if key not in cfg:
            raise SpecError(key, "a field of the HF config (missing)", source=source)
        return cfg[key]

    if need("hidden_act") != "silu":
        raise SpecError("hidden_act", '"silu" (SwiGLU)', cfg["hidden_act"], source=source)
    for flag in ("attention_bias", "mlp_bias", "qkv_bias"):
        if cfg.get(flag):
            raise SpecError(flag, "false (wanka's linear layers have no bias)", cfg[flag], source=source)
    rope = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling")
    if rope.get("rope_type", "default") != "default" or (scaling and scaling.get("rope_type", scaling.get("type")) != "default"):
        raise SpecError("rope_parameters.rope_type", '"default" (wanka has no RoPE scaling)', rope or scaling, source=source)
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    heads = need("num_attention_heads")
    fields = {"name": name, "layers": need("num_hidden_layers"), "hidden": need("hidden_size"), "heads": heads,
              "kv_heads": cfg.get("num_key_value_heads") or heads, "head_dim": cfg.get("head_dim") or need("hidden_size") // heads,
              "ffn_hidden": need("intermediate_size"), "vocab": need("vocab_size"),
              "seq_len": need("max_position_embeddings"), "activation": "swiglu",
              "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)), "rope_theta": float(theta),
              "norm_eps": float(need("rms_norm_eps"))}
    if arch == MIXTRAL:
        fields["moe"] = {"experts": need("num_local_experts"), "top_k": need("num_experts_per_tok"),
                         "ffn_hidden": need("intermediate_size")}
        fields["ffn_hidden"] = fields["moe"]["ffn_hidden"]
    elif arch == QWEN2_MOE:
        if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("use_sliding_window"):
            raise SpecError("decoder_sparse_step", "1 and no sliding window (wanka's MoE layers are contiguous)",
                            cfg.get("decoder_sparse_step"), source=source)
        if not cfg.get("norm_topk_prob", False):
            raise SpecError("norm_topk_prob", "true (wanka renormalises the top-k weights)", cfg.get("norm_topk_prob"), source=source)
        dense = sorted(cfg.get("mlp_only_layers") or [])
        if dense != list(range(len(dense))):
            raise SpecError("mlp_only_layers", "the leading layers 0..k-1 (wanka's dense_layers)", dense, source=source)
        ffn = need("moe_intermediate_size")
        shared_size = need("shared_expert_intermediate_size")
        shared = cfg.get("wanka_shared_experts", shared_size // ffn)
        if shared and shared * ffn != shared_size:
            raise SpecError("shared_expert_intermediate_size", f"a multiple of moe_intermediate_size ({ffn})", shared_size, source=source)
        fields["moe"] = {"experts": need("num_experts"), "top_k": need("num_experts_per_tok"), "ffn_hidden": ffn,
                         "shared_experts": shared, "dense_layers": len(dense)}
    return parse_model_spec(fields, source=source)


def _layer_names(spec: ModelSpec, arch: str, i: int) -> dict[str, str]:
    """wanka name -> HF name for layer i's tensors (weights only)."""
    w, h = f"layers.{i}.", f"model.layers.{i}."
    names = {f"{w}{a}.weight": f"{h}{b}.weight" for a, b in _ATTN.items()}
    moe = spec.moe
    if moe is None or i < moe.dense_layers:
        names.update({f"{w}feed_forward.{a}.weight": f"{h}mlp.{b}.weight" for a, b in _FFN.items()})
        return names
    if arch == MIXTRAL:  # the checkpoint's own w1/w2/w3 names
        names[f"{w}feed_forward.router.weight"] = f"{h}block_sparse_moe.gate.weight"
        for e in range(moe.experts):
            names.update({f"{w}feed_forward.experts.{e}.{a}.weight": f"{h}block_sparse_moe.experts.{e}.{a}.weight"
                          for a in _FFN})
        return names
    names[f"{w}feed_forward.router.weight"] = f"{h}mlp.gate.weight"
    for e in range(moe.experts):
        names.update({f"{w}feed_forward.experts.{e}.{a}.weight": f"{h}mlp.experts.{e}.{b}.weight" for a, b in _FFN.items()})
    if moe.shared_experts:
        names.update({f"{w}feed_forward.shared.{a}.weight": f"{h}mlp.shared_expert.{b}.weight" for a, b in _FFN.items()})
    return names


def name_map(spec: ModelSpec) -> dict[str, str]:
    arch = architecture(spec)
    names = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    if not spec.tied_embeddings:
        names["output.weight"] = "lm_head.weight"
    for i in range(spec.layers):
        names.update(_layer_names(spec, arch, i))
    return names


def _qwen_shared_slots(spec: ModelSpec) -> list[int]:
    moe = spec.moe
    return list(range(moe.dense_layers, spec.layers)) if architecture(spec) == QWEN2_MOE else []


def to_hf(spec: ModelSpec, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """wanka tensors -> HF tensors (fp32, contiguous)."""
    out = {hf: params[w].float().contiguous() for w, hf in name_map(spec).items()}
    for i in _qwen_shared_slots(spec):
        p = f"model.layers.{i}.mlp."
        out[p + "shared_expert_gate.weight"] = torch.zeros(1, spec.hidden)  # sigmoid(0) = 0.5
        if spec.moe.shared_experts:
            out[p + "shared_expert.down_proj.weight"] = out[p + "shared_expert.down_proj.weight"] * 2.0
        else:  # a shared expert of width 1 whose output is exactly zero
            out[p + "shared_expert.gate_proj.weight"] = torch.zeros(1, spec.hidden)
            out[p + "shared_expert.up_proj.weight"] = torch.zeros(1, spec.hidden)
            out[p + "shared_expert.down_proj.weight"] = torch.zeros(spec.hidden, 1)
    return out


def from_hf(spec: ModelSpec, tensors: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """HF tensors -> wanka tensors, checking names and shapes against `spec` (one-line SpecError)."""
    from wanka.serve.export import expected_shapes

    shapes = expected_shapes(spec)
    names = name_map(spec)
    if spec.tied_embeddings:
        tensors = {k: v for k, v in tensors.items() if k != "lm_head.weight"}  # some writers keep the tied copy
    out: dict[str, torch.Tensor] = {}
    for w, hf in names.items():
        if hf not in tensors:
            raise SpecError(hf, f"a tensor of shape {list(shapes[w])} (missing)", source=source)
        t = tensors[hf]
        if tuple(t.shape) != shapes[w]:
            raise SpecError(hf, f"shape {list(shapes[w])}", list(t.shape), source=source)
        out[w] = t.float().contiguous()
    known = set(names.values())
    for i in _qwen_shared_slots(spec):
        p = f"model.layers.{i}.mlp."
        gate = tensors.get(p + "shared_expert_gate.weight")
        if gate is None or torch.any(gate != 0):
            raise SpecError(p + "shared_expert_gate.weight", "all zeros (wanka's shared experts are ungated)", source=source)
        extra = [p + f"shared_expert.{b}.weight" for b in _FFN.values()] + [p + "shared_expert_gate.weight"]
        known.update(extra)
        if spec.moe.shared_experts:
            out[f"layers.{i}.feed_forward.shared.w2.weight"] = out[f"layers.{i}.feed_forward.shared.w2.weight"] * 0.5
        elif any(torch.any(tensors.get(n, torch.ones(1)) != 0) for n in extra[:3]):
            raise SpecError(p + "shared_expert", "zero weights (this model has no shared experts)", source=source)
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise SpecError(unknown[0], f"no such tensor in a {architecture(spec)} of this config (unexpected name)", source=source)
    return out
