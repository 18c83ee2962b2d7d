"""A plain full-sequence forward straight from the contract math: no cache, no batching.

It reads the export tensors by name and spells every step out, so that a test can hold the
KV-cached, batched `InferenceModel` against an independent reading of the model math (docs/serve.md "Model math").
"""

from __future__ import annotations

import math

import torch

from wanka.workload import ModelSpec


def _rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _rope(x, theta):
    """x [T, heads, d]: rotate pairs (j, j + d/2) by angle pos * theta^(-2j/d)."""
    t, _, d = x.shape
    half = d // 2
    freq = torch.tensor([theta ** (-2 * j / d) for j in range(half)], dtype=torch.float64)
    ang = torch.arange(t, dtype=torch.float64)[:, None] * freq[None, :]
    cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def _ffn(x, t, prefix, activation):
    w1, w2 = t[f"{prefix}.w1.weight"], t[f"{prefix}.w2.weight"]
    if activation == "swiglu":
        return (torch.nn.functional.silu(x @ w1.T) * (x @ t[f"{prefix}.w3.weight"].T)) @ w2.T
    return torch.nn.functional.gelu(x @ w1.T) @ w2.T


def reference_logits(spec: ModelSpec, t: dict[str, torch.Tensor], tokens: list[int]) -> torch.Tensor:
    """tokens (positions 0..T-1) -> logits [T, vocab]."""
    T, H, KV, d = len(tokens), spec.heads, spec.kv_heads_, spec.head_dim_
    x = t["tok_embeddings.weight"][torch.tensor(tokens)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(spec.layers):
        p = f"layers.{i}"
        a = _rms(x, t[f"{p}.attention_norm.weight"], spec.norm_eps)
        q = _rope((a @ t[f"{p}.attention.wq.weight"].T).view(T, H, d), spec.rope_theta)
        k = _rope((a @ t[f"{p}.attention.wk.weight"].T).view(T, KV, d), spec.rope_theta)
        v = (a @ t[f"{p}.attention.wv.weight"].T).view(T, KV, d)
        heads = []
        for h in range(H):
            kv = h // (H // KV)
            scores = (q[:, h] @ k[:, kv].T) / math.sqrt(d)
            scores = scores.masked_fill(~causal, float("-inf"))
            heads.append(torch.softmax(scores, -1) @ v[:, kv])
        x = x + torch.cat(heads, -1) @ t[f"{p}.attention.wo.weight"].T
        f = _rms(x, t[f"{p}.ffn_norm.weight"], spec.norm_eps)
        moe = spec.moe
        if moe is None or i < moe.dense_layers:
            x = x + _ffn(f, t, f"{p}.feed_forward", spec.activation)
            continue
        probs = torch.softmax(f @ t[f"{p}.feed_forward.router.weight"].T, -1)
        out = torch.zeros_like(f)
        for row in range(T):
            w, chosen = probs[row].topk(moe.top_k)
            w = w / w.sum()
            for wk, e in zip(w, chosen.tolist()):
                out[row] += wk * _ffn(f[row:row + 1], t, f"{p}.feed_forward.experts.{e}", spec.activation)[0]
        if moe.shared_experts:
            out = out + _ffn(f, t, f"{p}.feed_forward.shared", spec.activation)
        x = x + out
    x = _rms(x, t["norm.weight"], spec.norm_eps)
    out_w = t["tok_embeddings.weight"] if spec.tied_embeddings else t["output.weight"]
    return x @ out_w.T
