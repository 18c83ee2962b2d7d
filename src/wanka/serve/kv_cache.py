"""A paged KV cache (vLLM's PagedAttention layout, Kwon et al. SOSP'23, arXiv:2309.06180): fixed-size
blocks of `block_size` token positions, handed to requests as their contexts grow.

k and v are [layers, blocks, block_size, kv_heads, head_dim] fp32 (positions outside heads, so
a gathered run of blocks is one contiguous [positions, kv_heads, head_dim] tensor). A request holds a block table
(list of block ids); position p of its context lives in block table[p // block_size] at offset
p % block_size. Memory is fixed at start-up, but a short request takes only the blocks it fills,
so many more requests fit than with one max-length slot each.

Prefix caching (vLLM's automatic prefix caching): a full block is named by a hash chained over the
token ids of its context so far, so two requests whose contexts agree up to a block boundary name
the same block. Blocks are reference-counted; a block nobody holds stays in the free queue with its
contents and name until it is handed out again (oldest freed first), so a later request with the
same prefix takes it instead of recomputing it.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections import OrderedDict

import torch


def chain_hash(prev: bytes, tokens: list[int]) -> bytes:
    """Name of a full block: its tokens and everything before them (through `prev`)."""
    return hashlib.blake2b(prev + array("q", tokens).tobytes(), digest_size=16).digest()


class PagedKVCache:
    def __init__(self, layers: int, blocks: int, kv_heads: int, block_size: int, head_dim: int):
        shape = (layers, blocks, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape)
        self.v = torch.zeros(shape)
        self.block_size = block_size
        self.blocks = blocks
        self._ref = [0] * blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(blocks))  # oldest first
        self._name: dict[int, bytes] = {}      # block -> chained hash of its (full) contents
        self._block: dict[bytes, int] = {}     # chained hash -> block

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def used_blocks(self) -> int:
        return self.blocks - len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def _take(self) -> int:
        block, _ = self._free.popitem(last=False)
        name = self._name.pop(block, None)
        if name is not None:                   # evict the cached contents it still had
            del self._block[name]
        self._ref[block] = 1
        return block

    def grow(self, table: list[int], tokens: int) -> bool:
        """Extend `table` to hold `tokens` positions; False (and no change) when blocks run out."""
        need = self.blocks_for(tokens) - len(table)
        if need > len(self._free):
            return False
        for _ in range(max(0, need)):
            table.append(self._take())
        return True

    def table(self, tokens: int) -> list[int]:
        """A new block table for `tokens` positions (for scripts and tests)."""
        out: list[int] = []
        if not self.grow(out, tokens):
            raise MemoryError(f"{self.blocks_for(tokens)} KV blocks needed, {self.free_blocks} free")
        return out

    def release(self, table: list[int]) -> None:
        for block in table:
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._free[block] = None       # newest freed last: evicted last
        table.clear()

    # ---- prefix caching ----
    def name(self, block: int, h: bytes) -> None:
        """Record that full `block` holds the context named `h` (first name wins)."""
        if h not in self._block and block not in self._name:
            self._block[h], self._name[block] = block, h

    def match(self, ids: list[int]) -> tuple[list[int], list[bytes]]:
        """The cached blocks that hold a prefix of `ids` (at most len(ids) - 1 positions: the last
        token is always computed, for its logits), taken; and their names."""
        blocks, names, prev = [], [], b""
        for i in range((len(ids) - 1) // self.block_size):
            h = chain_hash(prev, ids[i * self.block_size:(i + 1) * self.block_size])
            block = self._block.get(h)
            if block is None:
                break
            if self._ref[block] == 0:
                del self._free[block]
            self._ref[block] += 1
            blocks.append(block)
            names.append(h)
            prev = h
        return blocks, names

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
