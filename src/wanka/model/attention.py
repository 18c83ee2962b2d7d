"""Causal multi-head attention with GQA (Ainslie et al. 2023, arXiv:2305.13245: query head h reads
kv head h // (heads/kv_heads)) and RoPE, scale 1/sqrt(head_dim). One set of projections, three
ways to run the core:

- a whole sequence (training, the full-sequence reference): `scaled_dot_product_attention(is_causal)`;
- a context-parallel ring (`self.ring`, set by train/parallelize.py `apply_cp`): this rank holds a
  zigzag slice of each sequence; RoPE uses the global positions and `ring.attend` runs ring attention;
- a paged KV cache (`kv`, a paged_attention.PagedKV: serving): the new rows' K/V go into the cache
  and each row attends to its sequence's cached positions.

Attention reshapes with view(..., -1, head_dim) so that a tensor-parallel rank holding heads/tp
heads runs the same code.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from wanka.model.layers import apply_rope, rope_tables
from wanka.workload.spec import ModelSpec


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer_id: int, rope_len: int | None = None):
        super().__init__()
        hd = spec.head_dim_
        self.head_dim, self.layer_id = hd, layer_id
        self.wq = nn.Linear(spec.hidden, spec.heads * hd, bias=False)
        self.wk = nn.Linear(spec.hidden, spec.kv_heads_ * hd, bias=False)
        self.wv = nn.Linear(spec.hidden, spec.kv_heads_ * hd, bias=False)
        self.wo = nn.Linear(spec.heads * hd, spec.hidden, bias=False)
        cos, sin = rope_tables(max(rope_len or 0, spec.seq_len), hd, spec.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.recompute_core = False  # "selective" recompute: only the attention core is recomputed
        self.ring = None  # context parallelism: a train.ring_attention.Ring

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        T = q.shape[1]
        if self.ring is not None:  # RoPE at the global positions of this rank's tokens
            pos = self.ring.positions(T).to(self.rope_cos.device)
            cos, sin = self.rope_cos[pos], self.rope_sin[pos]
        else:
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        q = apply_rope(q, cos, sin).transpose(1, 2)
        k = apply_rope(k, cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        scale = 1.0 / math.sqrt(self.head_dim)
        if self.ring is not None:
            return self.ring.attend(q, k, v, scale).transpose(1, 2)
        # GQA: local heads/kv ratio equals the global one, also on a tensor-parallel rank.
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale).transpose(1, 2)

    def forward(self, x: torch.Tensor, kv=None) -> torch.Tensor:
        """x [B, T, hidden] (a whole sequence or a ring slice), or with `kv` x [N, hidden]: the
        flat new rows of a serving batch."""
        lead = x.shape[:-1]
        q = self.wq(x).view(*lead, -1, self.head_dim)
        k = self.wk(x).view(*lead, -1, self.head_dim)
        v = self.wv(x).view(*lead, -1, self.head_dim)
        if kv is not None:
            cos, sin = kv.rope(self.rope_cos, self.rope_sin)
            out = kv.attend(self.layer_id, apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)
        elif self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        return self.wo(out.reshape(*lead, -1))
