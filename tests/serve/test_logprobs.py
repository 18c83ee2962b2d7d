"""Logprobs are the model's own log-softmax, checked against an independent full forward."""

from __future__ import annotations

import pytest
import torch

from wanka.serve.logprobs import chat_logprobs, completion_logprobs, token_string
from wanka.model.decoder import reference_logits
from wanka.serve.sampling import SamplingParams


def _reference_logprobs(export, ids: list[int]) -> torch.Tensor:
    logits = reference_logits(export.spec, export.tensors, ids)[:, :export.tokenizer.vocab_size]
    return torch.log_softmax(logits.double(), dim=-1)


@pytest.mark.parametrize("temperature,top_k", [(0.0, 5), (0.8, 3), (1.0, 0)])
def test_engine_logprobs_equal_a_direct_forward(tiny_export, run_alone, temperature, top_k):
    prompt = tiny_export.tokenizer.encode("The cluster", bos=True)
    params = SamplingParams(max_tokens=12, temperature=temperature, seed=3, ignore_eos=True, logprobs=top_k)
    req = run_alone(tiny_export, prompt, params)
    ref = _reference_logprobs(tiny_export, req.all_ids)
    assert [e.token for e in req.logprobs] == req.output_ids
    for t, entry in enumerate(req.logprobs):
        row = ref[len(prompt) - 1 + t]            # logits at the position before output token t
        assert entry.logprob == pytest.approx(float(row[entry.token]), abs=1e-4)
        values, ids = row.topk(top_k)
        assert [i for i, _ in entry.top] == ids.tolist()
        assert [lp for _, lp in entry.top] == pytest.approx(values.tolist(), abs=1e-4)
    if temperature == 0.0:                        # greedy: the sampled token is the most likely one
        assert all(e.top[0][0] == e.token for e in req.logprobs)


def test_no_logprobs_unless_asked(tiny_export, run_alone):
    req = run_alone(tiny_export, [256, 65], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    assert req.logprobs == []


def test_multibyte_tokens_are_named_by_their_bytes(cycle_dir, run_alone):
    from wanka.serve.export import load_export

    export = load_export(cycle_dir)
    tok = export.tokenizer
    req = run_alone(export, tok.encode("x", bos=True), SamplingParams(max_tokens=6, temperature=0.0, logprobs=1))
    legacy = completion_logprobs(tok, req.logprobs)
    assert legacy["tokens"] == ["bytes:\\xe4", "bytes:\\xb8", "bytes:\\x87", "bytes:\\xe5", "bytes:\\x8d", "bytes:\\xa1"]
    assert legacy["text_offset"] == [0, 0, 0, 1, 1, 1]   # a byte inside a character points at its start
    chat = chat_logprobs(tok, req.logprobs)["content"]
    assert bytes(b for e in chat for b in e["bytes"]).decode() == "万卡" == req.text
    assert token_string(tok, ord("a")) == "a" and token_string(tok, tok.eos_id) == "<|eos|>"
