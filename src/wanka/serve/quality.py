"""The quality cost of a model variant (e.g. INT8) against the fp32 original on held-out text.

- perplexity: exp(mean next-token cross-entropy) over windows of the text (context = the model's);
- teacher-forced agreement: fraction of positions where both models' argmax next token is equal;
- free-running greedy agreement: fraction of generated tokens equal, position by position, when
  both engines continue the same prompts greedily.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from wanka.serve.model import BatchLayout, InferenceModel


def window_logits(model: InferenceModel, ids: list[int]) -> torch.Tensor:
    """Logits for every position of `ids` (at most the model's context), no cache reuse."""
    cache = model.new_cache(-(-len(ids) // 16), 16)
    return model(torch.tensor(ids), BatchLayout([cache.table(len(ids))], [0], [len(ids)]), cache)


def _windows(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i:i + size] for i in range(0, len(ids) - 1, size) if len(ids[i:i + size]) > 1]


def perplexity(model: InferenceModel, ids: list[int]) -> float:
    nll, count = 0.0, 0
    for w in _windows(ids, model.max_len):
        logits = window_logits(model, w)[:-1]
        nll += F.cross_entropy(logits, torch.tensor(w[1:]), reduction="sum").item()
        count += len(w) - 1
    return math.exp(nll / count)


def argmax_agreement(a: InferenceModel, b: InferenceModel, ids: list[int]) -> float:
    same = total = 0
    for w in _windows(ids, a.max_len):
        la, lb = window_logits(a, w), window_logits(b, w)
        same += int((la.argmax(-1) == lb.argmax(-1)).sum())
        total += len(w)
    return same / total


def generation_agreement(outputs_a: list[list[int]], outputs_b: list[list[int]]) -> float:
    """Position-by-position equality of two greedy generations (the shorter one pads as unequal)."""
    same = total = 0
    for x, y in zip(outputs_a, outputs_b):
        same += sum(1 for u, v in zip(x, y) if u == v)
        total += max(len(x), len(y))
    return same / max(total, 1)
