"""Full (unsharded) parameters in the export contract's names, and their SHA-256.

Every rank takes part (DTensor.full_tensor is a collective over each parameter's mesh); the
first dp/tp rank of each pipeline stage contributes its stage's tensors, gathered on rank 0. The
hash walks names in sorted order over name bytes + fp32 little-endian tensor bytes, so it does not
depend on layout - but equal hashes across layouts need bit-equal numerics, which reductions in
a different order do not give (torch_cpu_probe.md item 7); across restarts of one layout it is exact.
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist


def full_params(trainer) -> dict[str, torch.Tensor] | None:
    """name -> fp32 CPU tensor of the whole model on rank 0; None on the other ranks."""
    from torch.distributed.tensor import DTensor

    local: dict[str, torch.Tensor] = {}
    for chunk in trainer.par.chunks:
        for name, p in chunk.named_parameters():
            t = p.full_tensor() if isinstance(p, DTensor) else p
            local[name] = t.detach().float().cpu().clone()
    if not trainer.distributed:
        return local
    c = trainer.dims.coords(trainer.rank)
    mine = local if c["dp_replicate"] == 0 and c["dp_shard"] == 0 and c["tp"] == 0 and c["cp"] == 0 else {}
    if not mine and c["tp"] == 0 and trainer.dims.dp_rank(trainer.rank) < trainer.dims.ep:
        # expert parallelism: the other ranks of the first EP group hold the other experts
        mine = {n: t for n, t in local.items() if ".feed_forward.experts." in n}
    gathered = [None] * trainer.world if trainer.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if trainer.rank != 0:
        return None
    out: dict[str, torch.Tensor] = {}
    for part in gathered:
        out.update(part)
    return out


def sha256_of(params: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(params[name].contiguous().numpy().tobytes())
    return h.hexdigest()


def params_sha256(trainer) -> str | None:
    params = full_params(trainer)
    return None if params is None else sha256_of(params)
