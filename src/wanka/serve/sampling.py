"""Per-request sampling: greedy (temperature 0), temperature, nucleus (top-p), seeded.

Each request owns a `torch.Generator`, so a seeded request draws the same tokens whatever else is
in the batch (its draws never interleave with another request's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None       # None: none; k >= 0: the sampled token's logprob and the top k


def new_generator(seed: int | None) -> torch.Generator:
    gen = torch.Generator()
    if seed is None:
        gen.seed()  # non-deterministic, as OpenAI's API without a seed
    else:
        gen.manual_seed(seed)
    return gen


def sample_token(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator) -> int:
    """logits [vocab] fp32 -> one token id."""
    if params.temperature == 0.0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        # keep the smallest set of most likely tokens whose mass reaches top_p (Holtzman et al.
        # 2020, "The Curious Case of Neural Text Degeneration", section 3.1)
        sorted_p, order = probs.sort(descending=True)
        before = sorted_p.cumsum(0) - sorted_p          # mass of the tokens ranked above each one
        sorted_p[before >= params.top_p] = 0.0
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_p)
    return int(torch.multinomial(probs, 1, generator=gen))
