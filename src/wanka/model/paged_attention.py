"""Attention over a paged KV cache (vLLM's PagedAttention layout, Kwon et al. SOSP'23,
arXiv:2309.06180; the cache itself is serve/kv_cache.py): the decoder's attention path when it is
given a `PagedKV`.

One forward call takes the new tokens of several sequences flattened into one [N] batch (a prefill
chunk of many tokens or one decode token each). The new keys/values are written into the cache
blocks, then all one-token (decode) sequences attend in one padded call and each prefill chunk in
its own call: causal attention with scale 1/sqrt(head_dim), query head h reading kv head
h // (heads // kv_heads) (GQA).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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


class PagedKV:
    """One forward call's view of a paged cache: where each new row goes and what it attends to.
    The cache object has k, v [layers, blocks, block_size, kv_heads, head_dim] and block_size."""

    def __init__(self, cache, batch: BatchLayout):
        self.cache = cache
        self.plan = AttentionPlan.build(batch, cache.block_size)
        self._rope = None

    def rope(self, cos_table: torch.Tensor, sin_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [N, head_dim] at the new rows' positions, looked up once per call: every layer's
        tables are built by the same `rope_tables`, so the first layer's rows serve them all."""
        if self._rope is None:
            pos = self.plan.rows_pos
            self._rope = cos_table[pos], sin_table[pos]
        return self._rope

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [N, heads, hd], k/v [N, kv_heads, hd] of the new rows (RoPE applied) -> [N, heads, hd]."""
        plan, cache = self.plan, self.cache
        heads, kv_heads, hd = q.shape[1], k.shape[1], q.shape[2]
        group = heads // kv_heads
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
            qd = q[plan.decode_rows].view(-1, kv_heads, group, hd)
            att = F.scaled_dot_product_attention(qd, keys, values, attn_mask=plan.decode_mask)
            out[plan.decode_rows] = att.reshape(-1, heads, hd)
        for offset, c, blocks, k_len, mask in plan.prefill:
            keys = _gather(k_cache, blocks[None])[0, :, :k_len].repeat_interleave(group, 0)    # [heads, k_len, hd]
            values = _gather(v_cache, blocks[None])[0, :, :k_len].repeat_interleave(group, 0)
            qp = q[offset:offset + c].transpose(0, 1)                        # [heads, c, hd]
            att = F.scaled_dot_product_attention(qp, keys, values, attn_mask=mask)
            out[offset:offset + c] = att.transpose(0, 1)
        return out


def _gather(cache: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """[B, nb] block ids -> [B, kv_heads, nb * block_size, hd] (a view of one gathered copy): the
    blocks laid end to end."""
    g = cache[blocks]                                       # [B, nb, block_size, kv_heads, hd]
    b, nb, bs, kv, hd = g.shape
    return g.view(b, nb * bs, kv, hd).transpose(1, 2)


