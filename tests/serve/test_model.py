"""KV-cached, batched, chunked decoding equals a plain full-sequence forward of the contract math."""

from __future__ import annotations

import pytest
import torch

from wanka.serve.export import load_export
from wanka.serve.fixtures import write_random_export
from wanka.serve.model import BatchLayout, InferenceModel
from wanka.model.decoder import reference_logits

VARIANTS = {
    "tiny": ("tiny", {}),
    "tiny-moe": ("tiny-moe", {}),
    "gelu-tied-mha": ("tiny", {"activation": "gelu", "tied_embeddings": True, "kv_heads": 4}),
    "moe-shared": ("tiny-moe", {"moe": {"experts": 4, "top_k": 2, "ffn_hidden": 64, "shared_experts": 1,
                                        "dense_layers": 1}}),
}


def _close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cached_decoding_matches_full_forward(variant, tmp_path):
    preset, overrides = VARIANTS[variant]
    export = load_export(write_random_export(tmp_path, preset, seed=7, **overrides))
    model = InferenceModel.from_tensors(export.spec, export.tensors)
    tokens = torch.randint(0, 258, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    other = tokens[::-1]
    ref = reference_logits(export.spec, export.tensors, tokens)

    cache = model.new_cache(40, 4)
    whole = model(torch.tensor(tokens), BatchLayout([cache.table(40)], [0], [40]), cache)
    _close(whole, ref)

    # the same sequence in 4-token blocks: a 10-token prefill, a 5-token chunk, then one token per
    # step batched with an unrelated sequence whose blocks interleave with ours (no leak either way)
    cache = model.new_cache(40, 4)
    ours, theirs = [], []
    assert cache.grow(ours, 10)
    pieces = [model(torch.tensor(tokens[:10]), BatchLayout([ours], [0], [10]), cache)]
    assert cache.grow(ours, 15)
    pieces.append(model(torch.tensor(tokens[10:15]), BatchLayout([ours], [10], [5]), cache))
    assert cache.grow(theirs, 3)
    model(torch.tensor(other[:3]), BatchLayout([theirs], [0], [3]), cache)
    for i in range(15, 40):
        j = i - 12
        assert cache.grow(ours, i + 1) and cache.grow(theirs, j + 1)
        step = model(torch.tensor([other[j], tokens[i]]), BatchLayout([theirs, ours], [j, i], [1, 1]), cache)
        pieces.append(step[1:])
    assert sorted(set(ours) | set(theirs)) == sorted(ours + theirs)  # no block shared
    assert max(ours) > min(theirs)  # and they interleave
    _close(torch.cat(pieces), ref)


def test_mixed_prefill_and_decode_in_one_call(tiny_export):
    """A prefill chunk and decode tokens of other sequences in one forward, logits for chosen rows."""
    spec, t = tiny_export.spec, tiny_export.tensors
    model = InferenceModel.from_tensors(spec, t)
    a, b = list(range(65, 85)), list(range(97, 110))
    cache = model.new_cache(12, 4)
    ta, tb = cache.table(20), cache.table(13)
    model(torch.tensor(a[:19]), BatchLayout([ta], [0], [19]), cache)
    logits = model(torch.tensor([a[19]] + b), BatchLayout([ta, tb], [19, 0], [1, 13]), cache,
                   torch.tensor([0, 13]))
    _close(logits[0], reference_logits(spec, t, a)[-1])
    _close(logits[1], reference_logits(spec, t, b)[-1])
