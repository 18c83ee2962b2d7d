"""`wanka data prepare`: sources (txt, JSONL, Parquet), cleaning, exact and near dedup, mixture
weights, and worker processes that do not change a byte of the output."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from wanka.data.clean import CleanConfig, KeySet, normalize
from wanka.data.pipeline import prepare
from wanka.data.shards import TokenShards
from wanka.data.tokenizer import ByteTokenizer
from wanka.errors import SpecError

_WORDS = [f"w{n}x" for n in range(3000)]


def _doc(rng: random.Random, words: int = 120) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _near_copy(text: str, rng: random.Random) -> str:
    words = text.split()
    words[rng.randrange(len(words))] = "changed"  # one word of 120: Jaccard of 5-gram sets ~ 0.92
    return " ".join(words)


def _documents(n: int, seed: int = 0):
    """n unique documents, then planted exact and near copies of some of them (counts returned)."""
    rng = random.Random(seed)
    docs = [_doc(rng) for _ in range(n)]
    exact = [docs[i] for i in range(0, n, 5)]
    near = [_near_copy(docs[i], rng) for i in range(1, n, 5)]
    out = docs + exact + near
    rng.shuffle(out[n:])  # copies come after their originals
    return out, len(exact), len(near)


def _decode_docs(path) -> list[str]:
    data = TokenShards(path)
    tok, out = ByteTokenizer(), []
    for k in range(len(data.meta["shards"])):
        start = int(data._starts[k])
        prev = 0
        for end in data.document_ends(k).tolist():
            ids = data.window(start + prev, end - prev).tolist()
            assert ids[-1] == tok.eos_id
            out.append(tok.decode(ids[:-1]))
            prev = end
    return out


def test_planted_duplicates_are_found(tmp_path):
    docs, n_exact, n_near = _documents(100)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    meta = prepare([tmp_path / "a.jsonl"], tmp_path / "out", shard_tokens=4000)
    src = meta["sources"][0]
    assert src["exact_duplicates"] == n_exact
    assert src["near_duplicates"] == n_near
    assert src["kept"] == 100
    assert _decode_docs(tmp_path / "out") == docs[:100]  # the originals, in order
    assert len(meta["shards"]) > 1


def test_without_near_dedup_only_exact_copies_go(tmp_path):
    docs, n_exact, n_near = _documents(40)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    meta = prepare([tmp_path / "a.jsonl"], tmp_path / "out", clean=CleanConfig(near_dedup=False))
    assert meta["sources"][0]["kept"] == 40 + n_near and meta["sources"][0]["exact_duplicates"] == n_exact


def test_txt_jsonl_and_parquet_read_the_same_documents(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rng = random.Random(3)
    docs = [_doc(rng, 30) for _ in range(12)]
    (tmp_path / "a.txt").write_text("\n\n\n".join(docs) + "\n")
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    pq.write_table(pa.table({"text": docs, "other": list(range(12))}), tmp_path / "a.parquet", row_group_size=5)
    outs = []
    for name in ("a.txt", "a.jsonl", "a.parquet"):
        prepare([tmp_path / name], tmp_path / name.replace(".", "_"))
        outs.append((tmp_path / name.replace(".", "_") / "shard_00000.bin").read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert _decode_docs(tmp_path / "a_parquet") == docs


def test_cleaning_normalises_and_filters(tmp_path):
    decomposed = "cafe\u0301 au lait for everyone here"  # e + combining acute -> é (NFC)
    assert normalize(decomposed) == "café au lait for everyone here"
    docs = [decomposed, "tiny", "1 2 3 4 5 6 7 8 9 10 11 12 13", "x" * 300, "a fine document\x07 of words"]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    meta = prepare([tmp_path / "a.jsonl"], tmp_path / "out", clean=CleanConfig(max_chars=200))
    src = meta["sources"][0]
    assert (src["too_short"], src["few_letters"], src["too_long"], src["kept"]) == (1, 1, 1, 2)
    assert _decode_docs(tmp_path / "out") == ["café au lait for everyone here", "a fine document of words"]


def test_mixture_weights_repeat_and_subsample(tmp_path):
    rng = random.Random(5)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = [_doc(rng, 20) for _ in range(10)]
    b = [_doc(rng, 20) for _ in range(400)]
    (tmp_path / "a" / "x.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in a))
    (tmp_path / "b" / "x.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in b))
    meta = prepare([f"{tmp_path / 'a'}@2", f"{tmp_path / 'b'}@0.25"], tmp_path / "out")
    got = _decode_docs(tmp_path / "out")
    assert got[:20] == [d for d in a for _ in range(2)]  # weight 2: every document twice
    kept_b = got[20:]
    assert set(kept_b) <= set(b) and 60 <= len(kept_b) <= 140  # weight 0.25 of 400: binomial, sd ~9
    assert meta["sources"][1]["kept"] == 400  # subsampling is not deduplication


def test_workers_do_not_change_the_output(tmp_path):
    docs, _, _ = _documents(60, seed=2)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([tmp_path / "a.jsonl"], tmp_path / "w0", shard_tokens=3000, workers=0)
    prepare([tmp_path / "a.jsonl"], tmp_path / "w2", shard_tokens=3000, workers=2)
    m0 = json.loads((tmp_path / "w0" / "meta.json").read_text())
    m2 = json.loads((tmp_path / "w2" / "meta.json").read_text())
    assert m0["shards"] == m2["shards"] and len(m0["shards"]) > 1
    assert not (tmp_path / "w2" / ".progress").exists()


def test_bad_inputs_are_one_line_errors(tmp_path):
    (tmp_path / "a.csv").write_text("x")
    (tmp_path / "bad.jsonl").write_text('{"text": "a fine document of words"}\n{"txt": 1}\n')
    cases = [([str(tmp_path / "a.csv")], "data.input"), ([f"{tmp_path / 'bad.jsonl'}@-1"], "data.input"),
             ([f"{tmp_path / 'bad.jsonl'}@x"], "data.input"), ([str(tmp_path / "bad.jsonl")], "bad.jsonl:2.text")]
    for inputs, field in cases:
        with pytest.raises(SpecError) as info:
            prepare(inputs, tmp_path / "out")
        assert field in info.value.field
    (tmp_path / "short.txt").write_text("tiny\n")
    with pytest.raises(SpecError, match="at least one document that passes the filters"):
        prepare([tmp_path / "short.txt"], tmp_path / "out2")
    assert not (tmp_path / "out2" / "meta.json").exists()


def test_keyset_grows_and_remembers():
    keys = KeySet(4)
    values = np.random.default_rng(0).integers(0, 1 << 63, 5000, dtype=np.uint64).tolist() + [0]
    for v in values:
        keys.add(v)
    assert keys.count == len(set(values)) and all(v in keys for v in values)
    assert 12345 not in keys
