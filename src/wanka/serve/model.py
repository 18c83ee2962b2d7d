"""The inference model: the one decoder (wanka.model.decoder) run on a paged KV cache, for a batch
of sequences.

One forward call takes the new tokens of several sequences flattened into one [N] tensor (a
prefill chunk of many tokens or one decode token each). Linear layers run on all N rows at once,
which is where batching pays on CPU; attention reads each sequence's blocks of the paged KV cache
(kv_cache.py) through model/paged_attention.py. Parameter names equal the export's tensor names,
so `load_state_dict(export.tensors, strict=True)` maps them one to one.
"""

from __future__ import annotations

import torch

from wanka.model.decoder import Transformer
from wanka.model.paged_attention import BatchLayout, PagedKV
from wanka.serve.kv_cache import PagedKVCache
from wanka.workload import ModelSpec

__all__ = ["BatchLayout", "InferenceModel"]


class InferenceModel(Transformer):
    def __init__(self, spec: ModelSpec, max_len: int | None = None):
        super().__init__(spec, rope_len=max_len or spec.seq_len)
        self.max_len = max_len or spec.seq_len

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
        return super().forward(tokens, kv=PagedKV(cache, batch), logit_rows=logit_rows)
