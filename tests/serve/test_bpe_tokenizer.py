"""The server uses whatever tokenizer an export ships: a byte-level BPE from `wanka data tokenizer
train` streams text that equals the tokenizer's own decode of the generated ids."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("tokenizers")
from wanka.data.bpe import BPETokenizer, train_bpe  # noqa: E402
from wanka.data.corpus import generate  # noqa: E402
from wanka.serve.engine import Engine, EngineConfig  # noqa: E402
from wanka.serve.export import load_export  # noqa: E402
from wanka.serve.fixtures import write_random_export  # noqa: E402
from wanka.serve.model import InferenceModel  # noqa: E402
from wanka.serve.sampling import SamplingParams  # noqa: E402


def test_engine_streams_bpe_text(tmp_path):
    tok = train_bpe([generate(300, seed=s) for s in range(5)] + ["万卡集群 🚀"], vocab=400)
    path = write_random_export(tmp_path / "export", "tiny")
    tok.save(path / "tokenizer.json")
    export = load_export(path)
    assert isinstance(export.tokenizer, BPETokenizer)
    engine = Engine(InferenceModel.from_tensors(export.spec, export.tensors), export.tokenizer, EngineConfig())
    params = SamplingParams(max_tokens=40, temperature=1.0, seed=3, ignore_eos=True)
    (req,) = engine.generate([export.tokenizer.encode("the busy cluster", bos=True)], params)
    assert len(req.output_ids) == 40 and max(req.output_ids) < 400
    assert req.text == export.tokenizer.decode(req.output_ids)  # multi-byte tokens joined correctly


def test_bpe_larger_than_the_model_vocab_is_refused(tmp_path):
    from wanka.errors import SpecError

    tok = train_bpe([generate(2000, seed=s) for s in range(3)], vocab=600)
    if tok.vocab_size <= 512:
        pytest.skip("corpus too small to learn 600 ids")
    path = write_random_export(tmp_path / "export", "tiny")
    tok.save(path / "tokenizer.json")
    with pytest.raises(SpecError, match="model.vocab"):
        load_export(path)
    shutil.rmtree(path)
