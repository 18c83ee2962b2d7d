"""The model matches the export contract: names, shapes, and math from an independent reference."""

import math

import torch
import torch.nn.functional as F

from wanka.train.model import build_model
from wanka.workload.spec import load_model


def reference_forward(p: dict, spec, tokens: torch.Tensor) -> torch.Tensor:
    """CONTRACTS.md math written out per head with explicit loops (no code shared with model.py)."""
    hd, H, KV = spec.head_dim_, spec.heads, spec.kv_heads_
    T = tokens.shape[1]

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + spec.norm_eps) * w

    def rope(v):  # v [T, hd]; pair (j, j + hd/2) rotated by pos * theta^(-2j/hd)
        out = v.clone()
        for j in range(hd // 2):
            ang = torch.arange(T, dtype=torch.float64) * spec.rope_theta ** (-2 * j / hd)
            c, s = ang.cos().float(), ang.sin().float()
            a, b = v[:, j], v[:, j + hd // 2]
            out[:, j], out[:, j + hd // 2] = a * c - b * s, a * s + b * c
        return out

    def swiglu(x, pre):
        return F.linear(F.silu(F.linear(x, p[pre + "w1.weight"])) * F.linear(x, p[pre + "w3.weight"]), p[pre + "w2.weight"])

    x = p["tok_embeddings.weight"][tokens[0]]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(spec.layers):
        pre = f"layers.{i}."
        a = rms(x, p[pre + "attention_norm.weight"])
        q = F.linear(a, p[pre + "attention.wq.weight"]).view(T, H, hd)
        k = F.linear(a, p[pre + "attention.wk.weight"]).view(T, KV, hd)
        v = F.linear(a, p[pre + "attention.wv.weight"]).view(T, KV, hd)
        heads = []
        for h in range(H):
            kv = h // (H // KV)
            scores = rope(q[:, h]) @ rope(k[:, kv]).T / math.sqrt(hd) + mask
            heads.append(scores.softmax(-1) @ v[:, kv])
        h_ = x + F.linear(torch.cat(heads, -1), p[pre + "attention.wo.weight"])
        f = rms(h_, p[pre + "ffn_norm.weight"])
        if pre + "feed_forward.router.weight" in p:
            probs = F.linear(f, p[pre + "feed_forward.router.weight"]).softmax(-1)
            w, idx = probs.topk(spec.moe.top_k, -1)
            w = w / w.sum(-1, keepdim=True)
            out = torch.zeros_like(f)
            for t in range(T):
                for slot in range(spec.moe.top_k):
                    e = int(idx[t, slot])
                    out[t] += w[t, slot] * swiglu(f[t : t + 1], f"{pre}feed_forward.experts.{e}.")[0]
        else:
            out = swiglu(f, pre + "feed_forward.")
        x = h_ + out
    return F.linear(rms(x, p["norm.weight"]), p["output.weight"])[None]


def test_parameter_names_and_shapes_follow_the_export_contract():
    spec = load_model("tiny")
    shapes = {k: tuple(v.shape) for k, v in build_model(spec, 0).state_dict().items()}
    hd, H, KV, d = spec.head_dim_, spec.heads, spec.kv_heads_, spec.hidden
    assert shapes["tok_embeddings.weight"] == (spec.vocab, d)
    assert shapes["layers.3.attention.wq.weight"] == (H * hd, d)
    assert shapes["layers.3.attention.wk.weight"] == (KV * hd, d)
    assert shapes["layers.0.attention.wo.weight"] == (d, H * hd)
    assert shapes["layers.0.feed_forward.w1.weight"] == (spec.ffn_hidden, d)
    assert shapes["layers.0.feed_forward.w2.weight"] == (d, spec.ffn_hidden)
    assert shapes["norm.weight"] == (d,) and shapes["output.weight"] == (spec.vocab, d)
    assert len(shapes) == 2 + 1 + spec.layers * 9  # no buffers (RoPE tables are not persistent)
    moe = load_model("tiny-moe")
    names = set(build_model(moe, 0).state_dict())
    assert "layers.0.feed_forward.w1.weight" in names  # dense_layers: 1
    assert "layers.1.feed_forward.router.weight" in names
    assert "layers.1.feed_forward.experts.3.w3.weight" in names


def test_dense_forward_matches_reference_math():
    spec = load_model("tiny", seq_len=16)
    model = build_model(spec, 1)
    tokens = torch.randint(0, 258, (1, 16))
    with torch.no_grad():
        ours = model(tokens)
        ref = reference_forward(model.state_dict(), spec, tokens)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5), (ours - ref).abs().max()


def test_moe_forward_matches_reference_and_has_balancing_loss():
    spec = load_model("tiny-moe", seq_len=8)
    model = build_model(spec, 2)
    tokens = torch.randint(0, 258, (1, 8))
    with torch.no_grad():
        ours = model(tokens)
        ref = reference_forward(model.state_dict(), spec, tokens)
    assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5), (ours - ref).abs().max()
    aux = float(model.aux_loss())
    assert aux >= 1.0 - 1e-5  # E * sum f_i P_i >= 1, equality at perfect balance (Switch eq. 4)


def test_same_seed_same_init_and_recompute_same_grads():
    spec = load_model("tiny", seq_len=16)
    a, b = build_model(spec, 5), build_model(spec, 5)
    for block in b.layers.values():
        block.recompute = True
    tokens = torch.randint(0, 258, (2, 16))
    a(tokens).sum().backward()
    b(tokens).sum().backward()
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa.detach(), pb.detach()), n
        assert torch.allclose(pa.grad, pb.grad, atol=1e-6), n


def test_logits_match_the_serving_reference():
    """Both sides of the export contract agree (serve's independent reference forward)."""
    serve_ref = __import__("pytest").importorskip("wanka.serve.reference")
    spec = load_model("tiny", seq_len=24)
    model = build_model(spec, 3)
    tokens = list(range(40, 64))
    with torch.no_grad():
        ours = model(torch.tensor([tokens]))[0]
    theirs = serve_ref.reference_logits(spec, model.state_dict(), tokens)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5)
