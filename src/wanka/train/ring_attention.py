"""Context parallelism: causal ring attention over point-to-point send/recv.

torch's `context_parallel` (torch.distributed.tensor.experimental) targets CUDA SDPA kernels and is
not among what torch_cpu_probe.md found working on CPU/gloo, so the runtime rings K/V itself:

- Load-balanced chunk order (the "zigzag" split of Megatron-Core's context parallelism and
  ring-flash-attention): the sequence is cut into 2*cp chunks and cp rank r holds chunks r and
  2*cp-1-r, so every rank gets the same amount of causal work.
- cp steps: at step s a rank holds the K/V of rank (r - s) mod cp, computes its queries' scores
  against them with the causal mask on global positions, and merges the block into its running
  output with the online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867; the blockwise form
  of Liu et al. 2023, Ring Attention, arXiv:2310.01889 s3); then K/V move one rank along the ring
  (batch_isend_irecv to r+1, from r-1).
- Backward: the ring shift is an autograd Function whose backward sends the gradient the other
  way, and the block math is ordinary autograd, so gradients are exact (memory is not optimised:
  every block's scores are kept for the backward).
Step 0 is the rank's own K/V, which contains each query's own position, so every row has a finite
running max before any fully masked block arrives (a fully masked block then gets weight 0).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

MASKED = -1e30  # finite "minus infinity": exp(MASKED - finite max) == 0 in fp32


def zigzag_positions(seq_len: int, cp: int, cp_rank: int) -> torch.Tensor:
    """Global token positions cp rank `cp_rank` holds: chunks cp_rank and 2*cp-1-cp_rank of 2*cp."""
    chunk = seq_len // (2 * cp)
    first = torch.arange(cp_rank * chunk, (cp_rank + 1) * chunk)
    second = torch.arange((2 * cp - 1 - cp_rank) * chunk, (2 * cp - cp_rank) * chunk)
    return torch.cat([first, second])


class _RingShift(torch.autograd.Function):
    """Send x to the next rank of the ring, receive the previous rank's; backward goes the other way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, ring: "Ring") -> torch.Tensor:
        ctx.ring = ring
        return ring.exchange(x, forward=True)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.ring.exchange(grad, forward=False), None


class Ring:
    """A cp group as a ring of global ranks."""

    def __init__(self, group, cp: int, cp_rank: int):
        self.group, self.cp, self.cp_rank = group, cp, cp_rank
        self.next = dist.get_global_rank(group, (cp_rank + 1) % cp)
        self.prev = dist.get_global_rank(group, (cp_rank - 1) % cp)

    def exchange(self, x: torch.Tensor, forward: bool) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        dst, src = (self.next, self.prev) if forward else (self.prev, self.next)
        ops = [dist.P2POp(dist.isend, x, dst, self.group), dist.P2POp(dist.irecv, out, src, self.group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return out

    def positions(self, local_len: int) -> torch.Tensor:
        return zigzag_positions(local_len * self.cp, self.cp, self.cp_rank)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """What the decoder's attention calls (model/attention.py): `ring_attention` on this ring."""
        return ring_attention(q, k, v, self, scale)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring, scale: float | None = None
                   ) -> torch.Tensor:
    """Causal attention of local q [B, H, T, D] against the whole ring's k/v [B, Hkv, T, D]
    (GQA: H a multiple of Hkv); returns [B, H, T, D] like scaled_dot_product_attention."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    rep = q.shape[1] // k.shape[1]
    q_pos = ring.positions(q.shape[2]).to(q.device)
    kv = torch.cat([k, v], dim=-1)
    d = k.shape[-1]
    m = l = o = None
    for step in range(ring.cp):
        if step > 0:
            kv = _RingShift.apply(kv, ring)
        src = (ring.cp_rank - step) % ring.cp
        k_pos = zigzag_positions(q.shape[2] * ring.cp, ring.cp, src).to(q.device)
        kb, vb = kv[..., :d], kv[..., d:]
        if rep > 1:
            kb, vb = kb.repeat_interleave(rep, dim=1), vb.repeat_interleave(rep, dim=1)
        scores = (q.float() @ kb.float().transpose(-1, -2)) * scale
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], MASKED)
        m_b = scores.amax(-1, keepdim=True)
        p = torch.exp(scores - m_b)
        l_b, o_b = p.sum(-1, keepdim=True), p @ vb.float()
        if m is None:
            m, l, o = m_b, l_b, o_b
        else:
            m_new = torch.maximum(m, m_b)
            a, b = torch.exp(m - m_new), torch.exp(m_b - m_new)
            m, l, o = m_new, l * a + l_b * b, o * a + o_b * b
    return (o / l).to(q.dtype)
