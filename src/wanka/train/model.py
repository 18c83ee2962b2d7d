"""A Llama-style decoder built from a `ModelSpec`, with the export contract's parameter names.

Math (docs/serve.md "Model math", the export contract): pre-norm blocks `h = x + attn(attention_norm(x))`,
`out = h + ffn(ffn_norm(h))`; RMSNorm in fp32 (Zhang & Sennrich 2019, arXiv:1910.07467);
rotate-half RoPE (Su et al. 2021, arXiv:2104.09864, eq. 34) with freq_j = theta^(-2j/head_dim);
GQA (Ainslie et al. 2023, arXiv:2305.13245): query head h reads kv head h // (heads/kv_heads);
SwiGLU `w2(silu(w1 x) * w3 x)` (Shazeer 2020, arXiv:2002.05202); MoE: softmax router -> top-k
-> renormalised weights (Mixtral, arXiv:2401.04088 section 2.1), Switch-style load-balancing
loss E * sum_i f_i * P_i (Fedus et al. 2021, arXiv:2101.03961 eq. 4).

Layers live in a ModuleDict keyed "0".."L-1" so that a pipeline stage can delete the layers it
does not own and every remaining parameter keeps its global name (layers.{i}.*), which is what
checkpoints and the export are keyed by. Attention reshapes with view(B, T, -1, head_dim) so a
tensor-parallel rank that holds heads/tp heads runs the same code.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from wanka.workload.spec import ModelSpec


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * self.weight.float()).type_as(x)


def rope_cos_sin(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [T, head_dim] for rotate-half RoPE: pair (j, j + head_dim/2) turns by pos*freq_j."""
    freqs = theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2 / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), freqs)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D] -> x*cos + rotate_half(x)*sin, rotate_half(a, b) = (-b, a)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    T = x.shape[1]
    return x * cos[:T, None, :].to(x.dtype) + rotated * sin[:T, None, :].to(x.dtype)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        hd = spec.head_dim_
        self.head_dim = hd
        self.wq = nn.Linear(spec.hidden, spec.heads * hd, bias=False)
        self.wk = nn.Linear(spec.hidden, spec.kv_heads_ * hd, bias=False)
        self.wv = nn.Linear(spec.hidden, spec.kv_heads_ * hd, bias=False)
        self.wo = nn.Linear(spec.heads * hd, spec.hidden, bias=False)
        cos, sin = rope_cos_sin(spec.seq_len, hd, spec.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.recompute_core = False  # "selective" recompute: only the attention core is recomputed
        self.ring = None  # context parallelism: a ring_attention.Ring (this rank holds a zigzag slice)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope_cos, self.rope_sin
        if self.ring is not None:  # RoPE at the global positions of this rank's tokens
            pos = self.ring.positions(q.shape[1]).to(cos.device)
            cos, sin = cos[pos], sin[pos]
        q = apply_rope(q, cos, sin).transpose(1, 2)
        k = apply_rope(k, cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        if self.ring is not None:
            from wanka.train.ring_attention import ring_attention

            return ring_attention(q, k, v, self.ring, scale=1.0 / math.sqrt(self.head_dim)).transpose(1, 2)
        # GQA: local heads/kv ratio equals the global one, also on a tensor-parallel rank.
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(self.head_dim))
        return out.transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T = x.shape[0], x.shape[1]
        q = self.wq(x).view(B, T, -1, self.head_dim)
        k = self.wk(x).view(B, T, -1, self.head_dim)
        v = self.wv(x).view(B, T, -1, self.head_dim)
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        return self.wo(out.reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, ffn_hidden: int, activation: str = "swiglu"):
        super().__init__()
        self.activation = activation
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)
        if activation == "swiglu":
            self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation == "swiglu":
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))  # exact erf GELU


class _AuxLossGrad(torch.autograd.Function):
    """Identity on the MoE output whose backward also hands the layer's load-balancing loss the
    gradient `scale` (= coefficient / micro-batches the loss is averaged over): the balancing loss
    reaches the router of every layer without travelling to the loss, so it works on every
    pipeline stage (Megatron-Core's MoEAuxLossAutoScaler does the same)."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


class MoE(nn.Module):
    """Top-k routed experts. `aux_scale` (set by the trainer) > 0 adds aux_scale x the balancing
    loss to the gradients (_AuxLossGrad).

    Training-side knobs, set by the trainer (train/experts.py, train/balance.py):
    - `expert_bias` (buffer, zeros unless bias balancing is on): added to the router
      probabilities for the top-k *selection* only; the gating weights stay the plain
      probabilities (DeepSeek-V3, arXiv:2412.19437 s2.1.2, auxiliary-loss-free balancing).
    - `capacity_factor` (None: dropless): each expert keeps at most
      ceil(factor * tokens * top_k / experts) of this rank's (token, expert) pairs, the ones with
      the highest router probability (GShard arXiv:2006.16668 s2.2 capacity; Megatron-Core's
      moe_token_drop_policy="probs"); dropped pairs contribute nothing.
    - `dispatcher` (None: every expert local): an ExpertDispatcher sending pairs to their EP rank.
    - `load`: tokens selected per expert since the trainer last read it (before drops).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        moe = spec.moe
        assert moe is not None
        self.top_k, self.n_experts = moe.top_k, moe.experts
        self.router = nn.Linear(spec.hidden, moe.experts, bias=False)
        # keyed by global expert id so that an EP rank holding a subset keeps the global names
        self.experts = nn.ModuleDict({str(e): FeedForward(spec.hidden, moe.ffn_hidden, spec.activation)
                                      for e in range(moe.experts)})
        if moe.shared_experts:
            self.shared = FeedForward(spec.hidden, moe.shared_experts * moe.ffn_hidden, spec.activation)
        self.register_buffer("expert_bias", torch.zeros(moe.experts), persistent=False)
        self.aux_loss = torch.zeros(())
        self.aux_scale = 0.0
        self.capacity_factor: float | None = None
        self.dispatcher = None
        self.load = torch.zeros(moe.experts, dtype=torch.float64)
        self.dropped = 0
        self.recording = True  # False while pipelining's shape inference runs the stage on placeholders

    @property
    def local_experts(self) -> list[int]:
        return [int(k) for k in self.experts.keys()]

    def keep_experts(self, experts) -> None:
        """Drop the experts this rank does not hold."""
        for k in list(self.experts.keys()):
            if int(k) not in experts:
                del self.experts[k]

    def _keep_mask(self, top_i: torch.Tensor, top_w: torch.Tensor) -> torch.Tensor:
        keep = torch.ones_like(top_i, dtype=torch.bool)
        if self.capacity_factor is None:
            return keep
        capacity = math.ceil(self.capacity_factor * top_i.numel() / self.n_experts)
        flat_i, flat_w = top_i.reshape(-1), top_w.reshape(-1).detach()
        flat_keep = keep.reshape(-1)
        for e in range(self.n_experts):
            pos = (flat_i == e).nonzero(as_tuple=True)[0]
            if pos.numel() > capacity:
                ranked = pos[torch.sort(flat_w[pos], descending=True, stable=True).indices]
                flat_keep[ranked[capacity:]] = False
        return keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(flat).float(), dim=-1)
        top_i = (probs + self.expert_bias).topk(self.top_k, dim=-1).indices  # bias: selection only
        top_w = probs.gather(-1, top_i)
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(x.dtype)
        keep = self._keep_mask(top_i, top_w)
        if torch.is_grad_enabled() and self.recording:
            self.load += torch.bincount(top_i.flatten(), minlength=self.n_experts).double()
            self.dropped += int((~keep).sum())
        if self.dispatcher is not None:
            out = self.dispatcher.run(flat, top_i, top_w, keep, self.experts)
        else:
            out = torch.zeros_like(flat)
            for key, expert in self.experts.items():
                rows, slot = ((top_i == int(key)) & keep).nonzero(as_tuple=True)
                # Every expert runs, even on zero rows, so each gets a (zero) gradient: under FSDP all
                # ranks must reduce-scatter the same set of gradients.
                out.index_add_(0, rows, expert(flat[rows]) * top_w[rows, slot, None])
        # Switch load-balancing loss: f_e = share of routed slots to e, P_e = mean router prob.
        n_exp = probs.shape[-1]
        f = torch.bincount(top_i.flatten(), minlength=n_exp).float() / top_i.numel()
        self.aux_loss = n_exp * (f * probs.mean(0)).sum()
        if hasattr(self, "shared"):
            out = out + self.shared(flat)
        if self.aux_scale > 0 and torch.is_grad_enabled():
            out = _AuxLossGrad.apply(out, self.aux_loss, self.aux_scale)
        return out.view(shape)


class TransformerBlock(nn.Module):
    def __init__(self, spec: ModelSpec, layer_id: int):
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden, spec.norm_eps)
        self.attention = Attention(spec)
        self.ffn_norm = RMSNorm(spec.hidden, spec.norm_eps)
        is_moe = spec.moe is not None and layer_id >= spec.moe.dense_layers
        self.feed_forward = MoE(spec) if is_moe else FeedForward(spec.hidden, spec.ffn_hidden, spec.activation)
        self.recompute = False  # "full" recompute: the whole block is recomputed in backward

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class Transformer(nn.Module):
    """Whole model, or one pipeline stage of it after `keep_stage` removed the rest."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        if spec.norm != "rmsnorm" or spec.mla is not None:
            from wanka.errors import SpecError

            raise SpecError("model", "an rmsnorm model without mla (the runtime's Llama-style decoder)", spec.name)
        self.spec = spec
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(spec, i) for i in range(spec.layers)})
        self.norm = RMSNorm(spec.hidden, spec.norm_eps)
        self.output = None if spec.tied_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 0.02) for every matrix, residual projections scaled by 1/sqrt(2L) (GPT-2 paper, section 2.3)."""
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.spec.layers) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            return self.output(h)
        if self.norm is not None and self.spec.tied_embeddings:
            return F.linear(h, self.tok_embeddings.weight)
        return h

    def set_aux_loss_scale(self, scale: float) -> None:
        """d(objective)/d(balancing loss) for the next backward passes (0: off)."""
        for layer in self.layers.values():
            if isinstance(layer.feed_forward, MoE):
                layer.feed_forward.aux_scale = scale

    def moe_layers(self) -> dict[str, MoE]:
        """This chunk's MoE feed-forwards by global layer index."""
        return {k: layer.feed_forward for k, layer in self.layers.items() if isinstance(layer.feed_forward, MoE)}

    def aux_loss(self) -> torch.Tensor:
        """Sum of the MoE load-balancing losses of the last forward (0 for a dense model)."""
        losses = [layer.feed_forward.aux_loss for layer in self.layers.values() if isinstance(layer.feed_forward, MoE)]
        return torch.stack(losses).sum() if losses else torch.zeros(())

    def keep_stage(self, first: int, last: int, is_first: bool, is_last: bool) -> "Transformer":
        """Drop everything outside layers [first, last) (and embeddings/head unless first/last stage)."""
        for i in list(self.layers.keys()):
            if not first <= int(i) < last:
                del self.layers[i]
        if not is_first:
            self.tok_embeddings = None
        if not is_last:
            self.norm = None
            self.output = None
        return self


def build_model(spec: ModelSpec, seed: int) -> Transformer:
    """The full model, initialised identically on every rank from `seed` (layout-independent init)."""
    torch.manual_seed(seed)
    return Transformer(spec)
