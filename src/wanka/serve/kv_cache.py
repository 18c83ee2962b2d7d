"""A paged KV cache (vLLM's PagedAttention layout, Kwon et al. SOSP'23, arXiv:2309.06180): fixed-size
blocks of `block_size` token positions, handed to requests as their contexts grow.

k and v are [layers, blocks, block_size, kv_heads, head_dim] fp32 (positions outside heads, so
a gathered run of blocks is one contiguous [positions, kv_heads, head_dim] tensor). A request holds a block table
(list of block ids); position p of its context lives in block table[p // block_size] at offset
p % block_size. Memory is fixed at start-up, but a short request takes only the blocks it fills,
so many more requests fit than with one max-length slot each.
"""

from __future__ import annotations

import math

import torch


class PagedKVCache:
    def __init__(self, layers: int, blocks: int, kv_heads: int, block_size: int, head_dim: int):
        shape = (layers, blocks, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape)
        self.v = torch.zeros(shape)
        self.block_size = block_size
        self.blocks = blocks
        self._free = list(range(blocks - 1, -1, -1))

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def grow(self, table: list[int], tokens: int) -> bool:
        """Extend `table` to hold `tokens` positions; False (and no change) when blocks run out."""
        need = self.blocks_for(tokens) - len(table)
        if need > len(self._free):
            return False
        for _ in range(max(0, need)):
            table.append(self._free.pop())
        return True

    def table(self, tokens: int) -> list[int]:
        """A new block table for `tokens` positions (for scripts and tests)."""
        out: list[int] = []
        if not self.grow(out, tokens):
            raise MemoryError(f"{self.blocks_for(tokens)} KV blocks needed, {self.free_blocks} free")
        return out

    def release(self, table: list[int]) -> None:
        self._free.extend(reversed(table))
        table.clear()

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
