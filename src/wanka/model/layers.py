"""Building blocks of the decoder: RMSNorm, rotate-half RoPE, the dense feed-forward.

Math (docs/serve.md "Model math", the export contract): RMSNorm computed in fp32 (Zhang & Sennrich
2019, arXiv:1910.07467); rotate-half RoPE (Su et al. 2021, arXiv:2104.09864, eq. 34) with
freq_j = theta^(-2j/head_dim), pairing (j, j + head_dim/2) as transformers' `rotate_half`;
SwiGLU `w2(silu(w1 x) * w3 x)` (Shazeer 2020, arXiv:2002.05202) or exact erf GELU `w2(gelu(w1 x))`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * self.weight.float()).type_as(x)


def rope_tables(length: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [length, head_dim] (fp32, computed in fp64): position p turns pair (j, j + head_dim/2)
    by p * freq_j."""
    freqs = theta ** (-torch.arange(0, head_dim // 2, dtype=torch.float64) * 2 / head_dim)
    angles = torch.outer(torch.arange(length, dtype=torch.float64), freqs)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, heads, D] with cos/sin [T, D] of each row's position: x*cos + rotate_half(x)*sin,
    rotate_half(a, b) = (-b, a). T is the sequence (training) or the flat rows of a batch (serving)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :].to(x.dtype) + rotated * sin[:, None, :].to(x.dtype)


class FeedForward(nn.Module):
    def __init__(self, hidden: int, ffn_hidden: int, activation: str = "swiglu"):
        super().__init__()
        self.activation = activation
        self.w1 = nn.Linear(hidden, ffn_hidden, bias=False)
        self.w2 = nn.Linear(ffn_hidden, hidden, bias=False)
        if activation == "swiglu":
            self.w3 = nn.Linear(hidden, ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation == "swiglu":
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))  # exact erf GELU
