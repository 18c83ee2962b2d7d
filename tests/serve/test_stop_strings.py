"""Text is held back only while its tail may still grow into a stop string."""

from __future__ import annotations

from wanka.serve.engine import Engine, EngineConfig, Request, _partial_stop
from wanka.serve.model import InferenceModel
from wanka.serve.sampling import SamplingParams


def test_partial_stop_is_the_longest_suffix_that_starts_a_stop_string():
    assert _partial_stop("abc\nus", ["\nuser:"]) == 3 and _partial_stop("abc", ["\nuser:"]) == 0
    assert _partial_stop("xa", ["ab", "aab"]) == 1


def test_stream_holds_back_only_a_partial_stop_match(tiny_export):
    """Chat adds the stop string "\\nuser:"; holding back len(stop) - 1 = 5 characters on every step
    would make chat streams lag five tokens behind. Only a real partial match waits."""
    tok = tiny_export.tokenizer
    engine = Engine(InferenceModel.from_tensors(tiny_export.spec, tiny_export.tensors), tok, EngineConfig())
    req = engine.add_request(Request(tok.encode("Once upon a time", bos=True),
                                     SamplingParams(12, temperature=0.0, stop=["\nuser:"], ignore_eos=True)))
    while engine.has_work():
        for d in engine.step():
            if not d.finished:  # every step's new text is out as soon as it cannot start a stop string
                assert req.emitted_chars == len(req.text) - _partial_stop(req.text, ["\nuser:"])
    assert req.emitted_chars == len(req.text)
