"""Continuous batching: greedy outputs equal one-at-a-time outputs; joins, leaves, budgets, stops."""

from __future__ import annotations

import pytest

from wanka.serve.engine import Engine, EngineConfig, QueueFull, Request
from wanka.serve.model import InferenceModel
from wanka.serve.sampling import SamplingParams

PROMPTS = ["Hello", "The cluster has ten thousand cards", "a", "Once upon a time", "xyz" * 9, "GPU"]


def _engine(export, **cfg) -> Engine:
    return Engine(InferenceModel.from_tensors(export.spec, export.tensors), export.tokenizer, EngineConfig(**cfg))


def _greedy(max_tokens):
    return SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def _one_at_a_time(export, prompts, lengths):
    engine = _engine(export, max_batch=1)
    return [engine.generate([export.tokenizer.encode(p, bos=True)], _greedy(n))[0].output_ids
            for p, n in zip(prompts, lengths)]


@pytest.mark.parametrize("which", ["tiny_export", "moe_export"])
def test_batched_greedy_equals_one_at_a_time(which, request):
    export = request.getfixturevalue(which)
    lengths = [5, 17, 9, 30, 3, 12]  # different lengths: requests leave the batch at different steps
    expected = _one_at_a_time(export, PROMPTS, lengths)
    # 4 slots and a 16-token budget: the 6 requests queue, long prompts are chunked, and requests
    # join as others leave
    engine = _engine(export, max_batch=4, max_batched_tokens=16)
    reqs = [engine.add_request(Request(export.tokenizer.encode(p, bos=True), _greedy(n)))
            for p, n in zip(PROMPTS, lengths)]
    sizes = []
    while engine.has_work():
        engine.step()
        assert engine.last_batch_tokens <= 16
        sizes.append(engine.last_batch_size)
    assert max(sizes) == 4
    assert [r.output_ids for r in reqs] == expected
    assert all(r.finish_reason == "length" and len(r.output_ids) == n for r, n in zip(reqs, lengths))


def test_requests_join_a_running_batch(tiny_export):
    tok = tiny_export.tokenizer
    expected = _one_at_a_time(tiny_export, PROMPTS[:2], [20, 6])
    engine = _engine(tiny_export, max_batch=4)
    first = engine.add_request(Request(tok.encode(PROMPTS[0], bos=True), _greedy(20)))
    for _ in range(5):
        engine.step()
    assert len(first.output_ids) == 5 and engine.last_batch_size == 1
    late = engine.add_request(Request(tok.encode(PROMPTS[1], bos=True), _greedy(6)))
    engine.step()  # the late request's prefill shares this forward call with the first's decode
    assert engine.last_batch_size == 2 and len(late.output_ids) == 1
    while engine.has_work():
        engine.step()
    assert [first.output_ids, late.output_ids] == expected


def test_seeded_sampling_does_not_depend_on_batch_companions(tiny_export):
    tok = tiny_export.tokenizer
    params = SamplingParams(max_tokens=12, temperature=0.9, top_p=0.95, seed=1234, ignore_eos=True)
    alone = _engine(tiny_export).generate([tok.encode("seeded", bos=True)], params)[0].output_ids
    engine = _engine(tiny_export)
    noise = SamplingParams(max_tokens=12, temperature=1.0, seed=None)
    reqs = engine.generate([tok.encode("other", bos=True), tok.encode("seeded", bos=True)], params)
    engine.generate([tok.encode("more", bos=True)], noise)
    assert reqs[1].output_ids == alone
    different = _engine(tiny_export).generate([tok.encode("seeded", bos=True)],
                                              SamplingParams(max_tokens=12, temperature=0.9, seed=99,
                                                             ignore_eos=True))[0].output_ids
    assert different != alone


def test_stop_string_cuts_the_text(tiny_export):
    tok = tiny_export.tokenizer
    prompt = tok.encode("The cluster has ten thousand cards", bos=True)
    full = _engine(tiny_export).generate([prompt], _greedy(30))[0]
    stop = full.text[6:8]
    cut = full.text.find(stop)
    stopped = _engine(tiny_export).generate([prompt], SamplingParams(30, temperature=0.0, stop=[stop],
                                                                     ignore_eos=True))[0]
    assert stopped.finish_reason == "stop" and stopped.text == full.text[:cut]
    assert len(stopped.output_ids) < 30


def test_streamed_deltas_add_up_and_hold_back_stop_prefixes(tiny_export):
    tok = tiny_export.tokenizer
    prompt = tok.encode("Once upon a time", bos=True)
    full = _engine(tiny_export).generate([prompt], _greedy(25))[0]
    stop = full.text[10:13]
    engine = _engine(tiny_export)
    req = engine.add_request(Request(prompt, SamplingParams(25, temperature=0.0, stop=[stop], ignore_eos=True)))
    pieces = []
    while engine.has_work():
        pieces += [d.text for d in engine.step()]
    assert "".join(pieces) == req.text == full.text[:full.text.find(stop)]
    assert stop not in "".join(pieces)


class _EosOnStep:
    """The real model, except that EOS wins the argmax on the `step`-th forward call."""

    def __init__(self, model, eos_id, step):
        self.model, self.eos_id, self.step, self.calls = model, eos_id, step, 0
        self.max_len, self.new_cache = model.max_len, model.new_cache

    def __call__(self, *args):
        logits = self.model(*args).clone()
        self.calls += 1
        if self.calls == self.step:
            logits[:, self.eos_id] = 1e9
        return logits


def test_eos_finishes_with_stop_and_is_counted(tiny_export):
    tok = tiny_export.tokenizer
    model = InferenceModel.from_tensors(tiny_export.spec, tiny_export.tensors)
    engine = Engine(_EosOnStep(model, tok.eos_id, step=4), tok, EngineConfig())
    req = engine.generate([tok.encode("hi", bos=True)], SamplingParams(max_tokens=10, temperature=0.0))[0]
    assert req.finish_reason == "stop" and len(req.output_ids) == 4 and req.output_ids[-1] == tok.eos_id
    assert req.text == tok.decode(req.output_ids[:-1])
    ignoring = Engine(_EosOnStep(model, tok.eos_id, step=4), tok, EngineConfig())
    req = ignoring.generate([tok.encode("hi", bos=True)], _greedy(10))[0]
    assert req.finish_reason == "length" and len(req.output_ids) == 10


def test_queue_full_raises(tiny_export):
    """max_queue bounds the requests waiting for a slot: with 1 slot and max_queue 2, three requests
    that arrive together fit (one gets the slot), a fourth does not."""
    engine = _engine(tiny_export, max_batch=1, max_queue=2)
    prompt = tiny_export.tokenizer.encode("x", bos=True)
    for _ in range(3):
        engine.add_request(Request(prompt, _greedy(3)))
    with pytest.raises(QueueFull):
        engine.add_request(Request(prompt, _greedy(3)))


def test_context_length_finishes_with_length(tiny_export):
    prompt = tiny_export.tokenizer.encode("y" * 120, bos=True)  # 121 of 128 tokens
    req = _engine(tiny_export).generate([prompt], _greedy(50))[0]
    assert req.finish_reason == "length" and len(req.all_ids) == 128
