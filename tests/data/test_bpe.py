"""`wanka data tokenizer train`: a byte-level BPE in the standard tokenizers format, used by
`data prepare`, readable by `transformers`, and streamed by the server's engine."""

from __future__ import annotations

import json
import random

import pytest

from wanka.data.corpus import generate

tokenizers = pytest.importorskip("tokenizers")
from wanka.data.bpe import BPETokenizer, byte_tokenizer_json  # noqa: E402
from wanka.data.tokenizer import ByteTokenizer, load_tokenizer  # noqa: E402

TEXTS = ["the busy cluster restarts the job.", "万卡集群 trains 8 nodes", "emoji 🚀 and <s> typed as text", ""]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from wanka.cli import main

    root = tmp_path_factory.mktemp("bpe")
    (root / "a.txt").write_text("\n\n".join(generate(200, seed=s) for s in range(10)) + "\n\n万卡集群的训练\n")
    assert main(["data", "tokenizer", "train", "--input", str(root / "a.txt"), "--vocab", "400",
                 "--out", str(root / "tok"), "--json"]) == 0
    return root


def test_trained_file_is_standard_and_round_trips(trained):
    path = trained / "tok" / "tokenizer.json"
    tok = load_tokenizer(path)
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == 400
    assert tokenizers.Tokenizer.from_file(str(path)).get_vocab_size() == 400  # the library's own format
    sample = generate(50, seed=99)
    ids = tok.encode(sample)
    assert len(ids) < 0.6 * len(sample.encode())  # merges learned: fewer tokens than bytes
    for text in TEXTS + [sample]:
        ids = tok.encode(text, bos=True, eos=True)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
        assert tok.bos_id not in ids[1:]  # "<s>" in the text is text
        assert tok.decode(ids) == text
        assert b"".join(tok.token_bytes(i) for i in ids) == text.encode()  # what the server streams


def test_transformers_reads_the_same_ids(trained):
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(trained / "tok" / "tokenizer.json"))
    tok = load_tokenizer(trained / "tok" / "tokenizer.json")
    assert hf("the busy cluster restarts the job.", add_special_tokens=False)["input_ids"] == tok.encode(
        "the busy cluster restarts the job.")


def test_prepare_with_the_bpe_tokenizer(trained, tmp_path):
    from wanka.data.pipeline import prepare
    from wanka.data.shards import TokenShards

    docs = [generate(20, seed=s) for s in range(5)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    meta = prepare([tmp_path / "d.jsonl"], tmp_path / "out", tokenizer=trained / "tok" / "tokenizer.json")
    data = TokenShards(tmp_path / "out")
    assert meta["dtype"] == "uint16" and isinstance(data.tokenizer, BPETokenizer)
    ids = data.window(0, data.tokens).tolist()
    assert data.tokenizer.decode(ids) == "".join(d.strip() for d in docs)  # EOS are special: dropped by decode
    assert ids.count(data.tokenizer.eos_id) == 5


def test_byte_tokenizer_as_tokenizers_json_gives_the_same_ids():
    byte, as_bpe = ByteTokenizer(), BPETokenizer(tokenizers.Tokenizer.from_str(byte_tokenizer_json()))
    rng = random.Random(0)
    for text in TEXTS + ["".join(chr(rng.randrange(32, 0x3000)) for _ in range(200))]:
        assert as_bpe.encode(text, bos=True, eos=True) == byte.encode(text, bos=True, eos=True)
        assert as_bpe.decode(as_bpe.encode(text)) == text
    assert (as_bpe.bos_id, as_bpe.eos_id, as_bpe.vocab_size) == (256, 257, 258)


def test_bad_requests_exit_2(run_cli, tmp_path):
    (tmp_path / "a.txt").write_text("some text here\n")
    code, _, err = run_cli("data", "tokenizer", "train", "--input", str(tmp_path / "a.txt"), "--vocab", "100",
                           "--out", str(tmp_path / "t"))
    assert code == 2 and "vocab: expected an integer in 259..1048576" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("data", "tokenizer", "train", "--input", str(tmp_path / "nope.txt"), "--vocab", "300",
                           "--out", str(tmp_path / "t"))
    assert code == 2 and "data.input" in err
    (tmp_path / "x.json").write_text(json.dumps({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "Whitespace"}}))
    code, _, err = run_cli("data", "prepare", str(tmp_path / "a.txt"), "--out", str(tmp_path / "o"), "--tokenizer",
                           str(tmp_path / "x.json"))
    assert code == 2 and "tokenizer.pre_tokenizer: expected a byte-level BPE" in err
