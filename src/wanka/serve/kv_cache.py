"""A preallocated KV-cache slot pool: one slot per running request, `max_len` positions each.

k and v are [layers, slots, kv_heads, max_len, head_dim] fp32. A slot is taken when a request is
admitted and given back when it finishes, so memory is fixed at start-up (vLLM pages its cache
in blocks to share memory across lengths; a padded slot per request is the simple CPU version).
"""

from __future__ import annotations

import torch


class KVCachePool:
    def __init__(self, layers: int, slots: int, kv_heads: int, max_len: int, head_dim: int):
        shape = (layers, slots, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape)
        self.v = torch.zeros(shape)
        self.max_len = max_len
        self._free = list(range(slots - 1, -1, -1))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()
