import json

import numpy as np
import pytest

from wanka.data.corpus import generate
from wanka.data.clean import CleanConfig
from wanka.data.pipeline import prepare
from wanka.data.shards import TokenShards
from wanka.data.tokenizer import ByteTokenizer
from wanka.errors import SpecError


def test_prepare_round_trips_text_across_shards(tmp_path):
    (tmp_path / "a.txt").write_text("héllo world")
    (tmp_path / "b.txt").write_text("second doc")
    meta = prepare([tmp_path], tmp_path / "out", shard_tokens=5, clean=CleanConfig(min_chars=1))
    tok = ByteTokenizer()
    first, second = tok.encode("héllo world", eos=True), tok.encode("second doc", eos=True)
    expected = first + second
    assert meta["tokens"] == len(expected)
    assert len(meta["shards"]) == 2  # a shard closes after the document that fills it; documents never split
    shards = TokenShards(tmp_path / "out")
    assert shards.window(0, len(expected)).tolist() == expected
    assert shards.window(3, 12).tolist() == expected[3:15]  # crosses the shard boundary
    assert np.fromfile(tmp_path / "out" / "shard_00000.bin", dtype=np.uint16).tolist() == first
    assert shards.document_ends(1).tolist() == [len(second)]


def test_generated_corpus_is_deterministic():
    assert generate(50, seed=1) == generate(50, seed=1)
    assert generate(50, seed=1) != generate(50, seed=2)


def test_bad_inputs_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match="data.input"):
        prepare([tmp_path / "missing.txt"], tmp_path / "out")
    with pytest.raises(SpecError, match="meta.json"):
        TokenShards(tmp_path)
    (tmp_path / "x.txt").write_text("a short document of text")
    prepare([tmp_path / "x.txt"], tmp_path / "o")
    (tmp_path / "o" / "shard_00000.bin").write_bytes(b"\0")  # truncated shard
    with pytest.raises(SpecError, match="data.shards"):
        TokenShards(tmp_path / "o")
    meta = json.loads((tmp_path / "o" / "meta.json").read_text())
    meta["format"] = "other"
    (tmp_path / "o" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SpecError, match="data.format"):
        TokenShards(tmp_path / "o")
