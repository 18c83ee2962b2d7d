"""Damaged data on disk is user input: a malformed meta.json or a corrupt shard is one
SpecError line, `prepare` into an unusable --out is too, and re-preparing leaves no stale shards."""

import hashlib
import json

import numpy as np
import pytest

from wanka.data.corpus import generate
from wanka.data.pipeline import prepare
from wanka.data.shards import TokenShards
from wanka.errors import SpecError


@pytest.fixture
def prepared(tmp_path):
    (tmp_path / "a.txt").write_text("\n\n".join(generate(8, seed=i) for i in range(6)))  # 6 distinct documents
    prepare([tmp_path / "a.txt"], tmp_path / "d", shard_tokens=100)
    return tmp_path / "d"


@pytest.mark.parametrize("change, field", [
    (lambda m: m.update(shards="x"), "data.shards"),
    (lambda m: m.update(shards=[{"file": "shard_00000.bin"}]), "data.shards"),
    (lambda m: m.update(shards=[]), "data.shards"),
    (lambda m: m.pop("tokenizer"), "data.tokenizer"),
])
def test_malformed_meta_is_a_spec_error(prepared, change, field):
    meta = json.loads((prepared / "meta.json").read_text())
    change(meta)
    (prepared / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SpecError) as info:
        TokenShards(prepared)
    assert info.value.field == field


def test_corrupt_shard_fails_the_checksum(prepared):
    TokenShards(prepared).verify_checksums()  # intact
    shard = np.memmap(prepared / "shard_00001.bin", dtype=np.uint16, mode="r+")
    shard[3] = 60000  # same size, so opening alone does not notice
    shard.flush()
    del shard
    with pytest.raises(SpecError, match="shard_00001.bin matching its sha256"):
        TokenShards(prepared).verify_checksums()


def test_prepare_into_a_file_is_a_spec_error(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecError) as info:
        prepare([tmp_path / "a.txt"], tmp_path / "f" / "d")
    assert info.value.field == "data.out"


def test_reprepare_removes_stale_shards(prepared, tmp_path):
    assert len(list(prepared.glob("shard_*.bin"))) > 1
    prepare([tmp_path / "a.txt"], prepared, shard_tokens=10_000)
    assert [p.name for p in prepared.glob("shard_*.bin")] == ["shard_00000.bin"]
    meta = json.loads((prepared / "meta.json").read_text())
    data = (prepared / "shard_00000.bin").read_bytes()
    assert meta["shards"][0]["sha256"] == hashlib.sha256(data).hexdigest()


def test_data_prepare_into_a_file_exits_2(run_cli, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = run_cli("data", "prepare", "--out", str(tmp_path / "f"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1
    code, _, err = run_cli("data", "prepare", "--out", str(tmp_path / "f" / "sub"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1
