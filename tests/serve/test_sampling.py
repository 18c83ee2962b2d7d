"""Sampling: greedy, nucleus cut-off, temperature."""

from __future__ import annotations

import math

import torch

from wanka.serve.sampling import SamplingParams, new_generator, sample_token

LOGITS = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.15), math.log(0.05)])


def test_temperature_zero_is_argmax():
    assert sample_token(LOGITS, SamplingParams(temperature=0.0), new_generator(0)) == 0


def test_top_p_keeps_the_smallest_set_reaching_p():
    gen = new_generator(0)
    draws = {sample_token(LOGITS, SamplingParams(temperature=1.0, top_p=0.7), gen) for _ in range(300)}
    assert draws == {0, 1}   # 0.5 < 0.7 <= 0.5 + 0.3
    draws = {sample_token(LOGITS, SamplingParams(temperature=1.0, top_p=0.4), gen) for _ in range(100)}
    assert draws == {0}


def test_full_distribution_and_frequencies():
    gen = new_generator(3)
    counts = torch.bincount(torch.tensor([sample_token(LOGITS, SamplingParams(), gen) for _ in range(4000)]),
                            minlength=4).float() / 4000
    assert torch.allclose(counts, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03)


def test_low_temperature_sharpens():
    gen = new_generator(1)
    draws = [sample_token(LOGITS, SamplingParams(temperature=0.1), gen) for _ in range(200)]
    assert draws.count(0) > 190   # p(0) = 0.5^10 / sum(p_i^10) > 0.99
