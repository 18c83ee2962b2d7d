"""The inference model: the export contract's math on a KV cache, for a batch of sequences.

One forward call takes the new tokens of several sequences flattened into one [N] tensor (a
prefill chunk of many tokens or one decode token each). Linear layers run on all N rows at once,
which is where batching pays on CPU; attention reads each sequence's blocks of the paged KV
cache (kv_cache.py): all one-token (decode) sequences in one padded call, each prefill chunk in its
own call.
Math (docs/serve.md "Model math"): pre-norm blocks, RMSNorm in fp32, rotate-half RoPE, causal attention with
scale 1/sqrt(head_dim), GQA head h -> kv head h // (heads // kv_heads), SwiGLU or erf-GELU FFN,
softmax-top_k-renormalised MoE router plus shared expert. Parameter names equal the tensor names,
so `load_state_dict(export.tensors, strict=True)` maps them one to one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from wanka.serve.kv_cache import PagedKVCache
from wanka.workload import ModelSpec


@dataclass
class BatchLayout:
    """Where each sequence's new tokens sit: rows [offset, offset+n) of the flat batch."""

    tables: list[list[int]]  # KV-cache block table per sequence (covers starts + counts positions)
    starts: list[int]        # tokens already in the cache (= position of the first new token)
    counts: list[int]        # new tokens per sequence

    @property
    def offsets(self) -> list[int]:
        out, acc = [], 0
        for n in self.counts:
            out.append(acc)
            acc += n
        return out

    def positions(self) -> torch.Tensor:
        return torch.cat([torch.arange(s, s + n) for s, n in zip(self.starts, self.counts)])

    def blocks_of(self, i: int, k_len: int, block_size: int) -> list[int]:
        return self.tables[i][:-(-k_len // block_size)]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim: int, max_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [max_len, head_dim] for rotate-half RoPE: pair (j, j + head_dim/2), freq theta^(-2j/d)."""
    inv_freq = theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2 / head_dim)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, head_dim]; cos/sin [N, head_dim] for each row's position."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


@dataclass
class AttentionPlan:
    """Index tensors for one forward call, built once and shared by every layer."""

    rows_block: torch.Tensor                # [N] cache block of each new token
    rows_off: torch.Tensor                  # [N] its offset in the block
    rows_pos: torch.Tensor                  # [N] its position
    decode_rows: torch.Tensor | None        # [Bd] rows of sequences with exactly one new token
    decode_blocks: torch.Tensor | None      # [Bd, nb] their block tables (padded with block 0)
    decode_mask: torch.Tensor | None        # [Bd, 1, 1, k_len] key j visible iff j <= position
    prefill: list[tuple[int, int, torch.Tensor, int, torch.Tensor]]  # (offset, count, blocks, k_len, causal mask)

    @classmethod
    def build(cls, batch: BatchLayout, block_size: int) -> "AttentionPlan":
        offsets, pos = batch.offsets, batch.positions()
        table_of_row = [t for t, n in zip(batch.tables, batch.counts) for _ in range(n)]
        rows_block = torch.tensor([t[p // block_size] for t, p in zip(table_of_row, pos.tolist())], dtype=torch.long)
        dec = [i for i, c in enumerate(batch.counts) if c == 1]
        d_rows = d_blocks = d_mask = None
        if dec:
            d_rows = torch.tensor([offsets[i] for i in dec])
            d_pos = torch.tensor([batch.starts[i] for i in dec])
            k_len = int(d_pos.max()) + 1
            nb = -(-k_len // block_size)
            d_blocks = torch.tensor([(batch.blocks_of(i, k_len, block_size) + [0] * nb)[:nb] for i in dec])
            d_mask = (torch.arange(k_len)[None, :] <= d_pos[:, None])[:, None, None, :]
        prefill = []
        for i, c in enumerate(batch.counts):
            if c > 1:
                s = batch.starts[i]
                # query t (position s+t) sees keys 0..s+t
                mask = torch.arange(s + c)[None, :] <= (s + torch.arange(c))[:, None]
                prefill.append((offsets[i], c, torch.tensor(batch.blocks_of(i, s + c, block_size)), s + c, mask))
        return cls(rows_block, pos % block_size, pos, d_rows, d_blocks, d_mask, prefill)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        hd, h, kv = spec.head_dim_, spec.heads, spec.kv_heads_
        self.heads, self.kv_heads, self.head_dim = h, kv, hd
        self.wq = nn.Linear(spec.hidden, h * hd, bias=False)
        self.wk = nn.Linear(spec.hidden, kv * hd, bias=False)
        self.wv = nn.Linear(spec.hidden, kv * hd, bias=False)
        self.wo = nn.Linear(h * hd, spec.hidden, bias=False)

    def forward(self, x, layer: int, cache: PagedKVCache, plan: AttentionPlan, cos, sin) -> torch.Tensor:
        n, hd, group = x.shape[0], self.head_dim, self.heads // self.kv_heads
        q = apply_rope(self.wq(x).view(n, self.heads, hd), cos, sin)
        k = apply_rope(self.wk(x).view(n, self.kv_heads, hd), cos, sin)
        v = self.wv(x).view(n, self.kv_heads, hd)
        k_cache, v_cache = cache.k[layer], cache.v[layer]      # [blocks, block_size, kv_heads, hd]
        k_cache[plan.rows_block, plan.rows_off] = k
        v_cache[plan.rows_block, plan.rows_off] = v
        out = torch.empty_like(q)
        if plan.decode_rows is not None:
            # one query per sequence: view the heads of a GQA group as that kv head's queries
            # (query head h = kv * group + g reads kv head h // group), so keys are not repeated
            k_len = plan.decode_mask.shape[-1]
            keys = _gather(k_cache, plan.decode_blocks)[:, :, :k_len]   # [Bd, kv_heads, k_len, hd]
            values = _gather(v_cache, plan.decode_blocks)[:, :, :k_len]
            qd = q[plan.decode_rows].view(-1, self.kv_heads, group, hd)
            att = F.scaled_dot_product_attention(qd, keys, values, attn_mask=plan.decode_mask)
            out[plan.decode_rows] = att.reshape(-1, self.heads, hd)
        for offset, c, blocks, k_len, mask in plan.prefill:
            keys = _gather(k_cache, blocks[None])[0, :, :k_len].repeat_interleave(group, 0)    # [heads, k_len, hd]
            values = _gather(v_cache, blocks[None])[0, :, :k_len].repeat_interleave(group, 0)
            qp = q[offset:offset + c].transpose(0, 1)                        # [heads, c, hd]
            att = F.scaled_dot_product_attention(qp, keys, values, attn_mask=mask)
            out[offset:offset + c] = att.transpose(0, 1)
        return self.wo(out.reshape(n, self.heads * hd))


def _gather(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """[B, nb] block ids -> [B, kv_heads, nb * block_size, hd] (a view of one gathered copy): the
    blocks laid end to end."""
    g = cache[blocks]                                       # [B, nb, block_size, kv_heads, hd]
    b, nb, bs, kv, hd = g.shape
    return g.view(b, nb * bs, kv, hd).transpose(1, 2)


class FeedForward(nn.Module):
    def __init__(self, hidden: int, ffn: int, activation: str):
        super().__init__()
        self.swiglu = activation == "swiglu"
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        if self.swiglu:
            self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))  # exact erf GELU


class MoEFeedForward(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        moe = spec.moe
        self.top_k = moe.top_k
        self.router = nn.Linear(spec.hidden, moe.experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(spec.hidden, moe.ffn_hidden, spec.activation)
                                     for _ in range(moe.experts))
        self.shared = (FeedForward(spec.hidden, moe.shared_experts * moe.ffn_hidden, spec.activation)
                       if moe.shared_experts else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, k = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]) * weights[rows, k, None])
        if self.shared is not None:
            out = out + self.shared(x)
        return out


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.attention_norm = RMSNorm(spec.hidden, spec.norm_eps)
        self.attention = Attention(spec)
        self.ffn_norm = RMSNorm(spec.hidden, spec.norm_eps)
        dense = spec.moe is None or layer < spec.moe.dense_layers
        self.feed_forward = (FeedForward(spec.hidden, spec.ffn_hidden, spec.activation) if dense
                             else MoEFeedForward(spec))


class InferenceModel(nn.Module):
    def __init__(self, spec: ModelSpec, max_len: int | None = None):
        super().__init__()
        self.spec = spec
        self.max_len = max_len or spec.seq_len
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(Block(spec, i) for i in range(spec.layers))
        self.norm = RMSNorm(spec.hidden, spec.norm_eps)
        self.output = None if spec.tied_embeddings else nn.Linear(spec.hidden, spec.vocab, bias=False)
        cos, sin = rope_tables(spec.head_dim_, self.max_len, spec.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @classmethod
    def from_tensors(cls, spec: ModelSpec, tensors: dict[str, torch.Tensor], max_len: int | None = None):
        model = cls(spec, max_len)
        model.load_state_dict(tensors, strict=True)
        return model.eval().requires_grad_(False)

    def new_cache(self, blocks: int, block_size: int = 16) -> PagedKVCache:
        s = self.spec
        return PagedKVCache(s.layers, blocks, s.kv_heads_, block_size, s.head_dim_)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, batch: BatchLayout, cache: PagedKVCache,
                logit_rows: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [N] (flat new tokens) -> logits [len(logit_rows), vocab] (all N rows when None)."""
        plan = AttentionPlan.build(batch, cache.block_size)
        cos, sin = self.rope_cos[plan.rows_pos], self.rope_sin[plan.rows_pos]
        x = self.tok_embeddings(tokens)
        for i, block in enumerate(self.layers):
            h = x + block.attention(block.attention_norm(x), i, cache, plan, cos, sin)
            x = h + block.feed_forward(block.ffn_norm(h))
        if logit_rows is not None:
            x = x[logit_rows]
        x = self.norm(x)
        return self.output(x) if self.output is not None else F.linear(x, self.tok_embeddings.weight)
