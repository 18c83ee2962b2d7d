"""The one decoder (wanka.model) against an independent reading of the model math.

`oracle_logits` below spells the export contract (docs/serve.md "Model math") out per head and per
token, sharing no code with wanka.model: RMSNorm, rotate-half RoPE, causal GQA attention, SwiGLU or
GELU, softmax -> top-k -> renormalised MoE routing, shared experts. The decoder's three paths are
held against it: the whole-sequence forward (training, `reference_logits`), and the paged KV-cache
path (serving) for a prefill followed by decode steps. (The ring path: tests/train/test_context_parallel.py.)
"""

import math
from types import SimpleNamespace

import pytest
import torch

from wanka.model.decoder import Transformer, build_model, reference_logits
from wanka.model.paged_attention import BatchLayout, PagedKV
from wanka.workload.spec import load_model


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


def oracle_logits(spec, t: dict[str, torch.Tensor], tokens: list[int]) -> torch.Tensor:
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
            heads.append(torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v[:, kv])
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
            for wk, e in zip(w / w.sum(), chosen.tolist()):
                out[row] += wk * _ffn(f[row:row + 1], t, f"{p}.feed_forward.experts.{e}", spec.activation)[0]
        if moe.shared_experts:
            out = out + _ffn(f, t, f"{p}.feed_forward.shared", spec.activation)
        x = x + out
    x = _rms(x, t["norm.weight"], spec.norm_eps)
    return x @ (t["tok_embeddings.weight"] if spec.tied_embeddings else t["output.weight"]).T


def _perturbed(spec, seed) -> dict[str, torch.Tensor]:
    """Weights moved off their init (norm weights != 1 too), so every tensor matters."""
    model = build_model(spec, seed)
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}


SPECS = {
    "tiny": lambda: load_model("tiny", seq_len=24),
    "tiny-moe": lambda: load_model("tiny-moe", seq_len=24),
    "gelu-shared": lambda: load_model("tiny-moe", seq_len=24).model_copy(update={
        "activation": "gelu", "moe": load_model("tiny-moe").moe.model_copy(update={"shared_experts": 1})}),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_whole_sequence_forward_matches_the_oracle(name):
    spec = SPECS[name]()
    t = _perturbed(spec, 1)
    tokens = torch.randint(0, spec.vocab, (24,), generator=torch.Generator().manual_seed(2)).tolist()
    ours = reference_logits(spec, t, tokens)
    torch.testing.assert_close(ours, oracle_logits(spec, t, tokens), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_paged_kv_cache_path_matches_the_oracle(name):
    # two sequences in one batch: a 10-token prefill of A beside a 7-token prefill of B, then
    # three decode steps of both together, through a 4-position-block cache with scattered blocks
    spec = SPECS[name]()
    t = _perturbed(spec, 3)
    model = Transformer(spec).eval()
    model.load_state_dict(t, strict=True)
    L, bs = spec.layers, 4
    cache = SimpleNamespace(block_size=bs, k=torch.zeros(L, 12, bs, spec.kv_heads_, spec.head_dim_))
    cache.v = torch.zeros_like(cache.k)
    tables = [[5, 2, 9, 0], [7, 1, 11]]
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, spec.vocab, (13,), generator=g).tolist(), torch.randint(0, spec.vocab, (10,), generator=g).tolist()]
    starts, counts = [0, 0], [10, 7]
    outputs = []
    with torch.no_grad():
        for _ in range(4):
            new = torch.tensor([tok for s, st, n in zip(seqs, starts, counts) for tok in s[st:st + n]])
            last = torch.tensor([sum(counts[:i + 1]) - 1 for i in range(2)])
            outputs.append((list(starts), list(counts),
                            model(new, kv=PagedKV(cache, BatchLayout(tables, starts, counts)), logit_rows=last)))
            starts, counts = [st + n for st, n in zip(starts, counts)], [1, 1]
    for st, n, logits in outputs:
        for i in range(2):
            want = oracle_logits(spec, t, seqs[i][:st[i] + n[i]])[-1]
            torch.testing.assert_close(logits[i], want, atol=1e-5, rtol=1e-5)
