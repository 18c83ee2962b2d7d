"""The decoder: a Llama-style model built from a `ModelSpec`, with the export contract's parameter
names. Training (train/parallelize.py), serving (serve/model.py, with a paged KV cache) and the
tests' full-sequence reference (`reference_logits`) all run this one definition.

Math (docs/serve.md "Model math", the export contract): pre-norm blocks `h = x + attn(attention_norm(x))`,
`out = h + ffn(ffn_norm(h))` (layers.py, attention.py, moe.py for the sources of each part).

Layers live in a ModuleDict keyed "0".."L-1" so that a pipeline stage can delete the layers it
does not own and every remaining parameter keeps its global name (layers.{i}.*), which is what
checkpoints and the export are keyed by.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from wanka.model.attention import Attention
from wanka.model.layers import FeedForward, RMSNorm
from wanka.model.moe import MoE
from wanka.workload.spec import ModelSpec


class TransformerBlock(nn.Module):
    def __init__(self, spec: ModelSpec, layer_id: int, rope_len: int | None = None):
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden, spec.norm_eps)
        self.attention = Attention(spec, layer_id, rope_len)
        self.ffn_norm = RMSNorm(spec.hidden, spec.norm_eps)
        is_moe = spec.moe is not None and layer_id >= spec.moe.dense_layers
        self.feed_forward = MoE(spec) if is_moe else FeedForward(spec.hidden, spec.ffn_hidden, spec.activation)
        self.recompute = False  # "full" recompute: the whole block is recomputed in backward

    def _forward(self, x: torch.Tensor, kv=None) -> torch.Tensor:
        # kv only goes in when there is one: tensor-parallel input hooks see (x,) as before
        a = self.attention_norm(x)
        h = x + (self.attention(a) if kv is None else self.attention(a, kv))
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor, kv=None) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x, kv)


class Transformer(nn.Module):
    """Whole model, or one pipeline stage of it after `keep_stage` removed the rest."""

    def __init__(self, spec: ModelSpec, rope_len: int | None = None):
        """`rope_len`: positions the RoPE tables cover (default and minimum: spec.seq_len)."""
        super().__init__()
        if spec.norm != "rmsnorm" or spec.mla is not None:
            from wanka.errors import SpecError

            raise SpecError("model", "an rmsnorm model without mla (the runtime's Llama-style decoder)", spec.name)
        if spec.sliding_window is not None and spec.sliding_window < spec.seq_len:  # planned, not run
            from wanka.errors import SpecError

            raise SpecError("model.sliding_window", f"null or >= seq_len {spec.seq_len} (the runtime's attention is "
                            "full causal)", spec.sliding_window)
        self.spec = spec
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(spec, i, rope_len) for i in range(spec.layers)})
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

    def forward(self, tokens: torch.Tensor, kv=None, logit_rows: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, vocab] (a pipeline stage: its own input -> output).
        Serving: tokens [N] flat new rows with `kv` a paged_attention.PagedKV, and `logit_rows`
        the rows whose logits are wanted (all when None)."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h) if kv is None else layer(h, kv)
        if logit_rows is not None:
            h = h[logit_rows]
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


def reference_logits(spec: ModelSpec, tensors: dict[str, torch.Tensor], tokens: list[int]) -> torch.Tensor:
    """The plain full-sequence forward (no cache, no batching) of the export tensors: logits
    [T, vocab] for tokens at positions 0..T-1. Tests hold the served (KV-cached, batched) path
    against it; tests/model/test_decoder.py holds it against an independent per-head reading of
    the math."""
    model = Transformer(spec, rope_len=len(tokens))
    model.load_state_dict(tensors, strict=True)
    with torch.no_grad():
        return model.eval()(torch.tensor([tokens]))[0]
