"""The training side of the one decoder (wanka.model.decoder): the export contract's names and
shapes, init, recompute, and the balancing loss. Its math against an independent per-head reading:
tests/model/test_decoder.py."""

import torch

from wanka.model.decoder import build_model
from wanka.workload.spec import load_model


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


def test_moe_forward_has_a_balancing_loss():
    spec = load_model("tiny-moe", seq_len=8)
    model = build_model(spec, 2)
    model(torch.randint(0, 258, (1, 8)))  # with autograd on: the balancing loss is a training quantity
    aux = float(model.aux_loss().detach())
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


def test_balancing_loss_reaches_the_router_through_the_backward_alone():
    # the gradient the trainer gets from aux_scale equals that of adding coef x aux to the loss, so
    # it also works on pipeline stages that never see the loss (the layer's own backward adds it)
    spec = load_model("tiny-moe", seq_len=16)
    tokens = torch.randint(0, 258, (2, 16))
    explicit, injected, plain = build_model(spec, 7), build_model(spec, 7), build_model(spec, 7)
    (explicit(tokens).sum() + 0.25 * explicit.aux_loss()).backward()
    injected.set_aux_loss_scale(0.25)
    injected(tokens).sum().backward()
    plain(tokens).sum().backward()
    router = "layers.1.feed_forward.router.weight"
    grads = {m: dict(model.named_parameters())[router].grad for m, model in
             (("explicit", explicit), ("injected", injected), ("plain", plain))}
    assert torch.allclose(grads["injected"], grads["explicit"], atol=1e-6, rtol=1e-5)
    assert not torch.allclose(grads["plain"], grads["explicit"], atol=1e-6, rtol=1e-5)
    for (n, a), (_, b) in zip(explicit.named_parameters(), injected.named_parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6, rtol=1e-5), n
