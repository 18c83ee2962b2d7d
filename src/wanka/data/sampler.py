"""Deterministic, resumable sampler over fixed-length windows, sharded by data-parallel rank.

The token stream is cut into windows of seq_len+1 tokens (input + shifted target) at stride
seq_len. Epoch e visits the windows in `np.random.default_rng((seed, e)).permutation`. Batch b
(the b-th global batch, gbs windows) is positions [b*gbs, (b+1)*gbs) of that endless order; data
parallel rank r of dp takes the contiguous slice r*gbs/dp ... so the union over ranks - and hence
the loss of a step - does not depend on dp. The whole state is the next batch index plus the set
of batches to skip (after a loss spike), so resume and resharding to another dp are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from wanka.data.shards import TokenShards
from wanka.errors import SpecError


@dataclass
class SamplerState:
    next_batch: int = 0
    skip: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"next_batch": self.next_batch, "skip": sorted(self.skip)}

    @classmethod
    def from_dict(cls, d: dict) -> "SamplerState":
        return cls(int(d["next_batch"]), [int(s) for s in d.get("skip", [])])


class Sampler:
    def __init__(self, data: TokenShards, seq_len: int, gbs: int, dp_rank: int = 0, dp: int = 1, seed: int = 0):
        if gbs % dp:
            raise SpecError("layout.gbs", f"a multiple of dp ({dp})", gbs)
        self.data, self.seq_len, self.gbs, self.dp_rank, self.dp, self.seed = data, seq_len, gbs, dp_rank, dp, seed
        self.windows = (data.tokens - 1) // seq_len
        if self.windows < gbs:
            raise SpecError("data", f"at least gbs*seq_len+1 = {gbs * seq_len + 1} tokens", data.tokens)
        self.state = SamplerState()
        self._perm_epoch, self._perm = -1, np.empty(0)

    def _window_id(self, position: int) -> int:
        epoch, i = divmod(position, self.windows)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng((self.seed, epoch)).permutation(self.windows)
            self._perm_epoch = epoch
        return int(self._perm[i])

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's slice of global batch `index`: inputs and targets [gbs/dp, seq_len]."""
        per = self.gbs // self.dp
        first = index * self.gbs + self.dp_rank * per
        rows = [self.data.window(self._window_id(first + j) * self.seq_len, self.seq_len + 1) for j in range(per)]
        arr = torch.from_numpy(np.stack(rows))
        return arr[:, :-1].contiguous(), arr[:, 1:].contiguous()

    def next(self) -> tuple[int, torch.Tensor, torch.Tensor]:
        """Advance past skipped batches; returns (batch index, inputs, targets)."""
        while self.state.next_batch in self.state.skip:
            self.state.next_batch += 1
        index = self.state.next_batch
        self.state.next_batch += 1
        x, y = self.batch(index)
        return index, x, y


def microbatches(x: torch.Tensor, y: torch.Tensor, mbs: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Split a rank's batch into micro-batches of mbs sequences (gradient accumulation)."""
    return [(x[i : i + mbs], y[i : i + mbs]) for i in range(0, x.shape[0], mbs)]
