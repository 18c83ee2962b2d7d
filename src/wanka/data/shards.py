"""Indexed token shards (`wanka data prepare` writes them, the trainer's sampler reads them by mmap).

A prepared directory holds, per shard k (Megatron-LM's indexed dataset split into .bin + .idx,
megatron/core/datasets/indexed_dataset.py, simplified to one dtype per directory):
    shard_0000k.bin   token ids, little-endian uint16 (vocab <= 65,536) or uint32, documents
                      back to back, each ended by EOS; documents never cross shards
    shard_0000k.idx   little-endian int64 end offset (in tokens) of each document in the .bin
plus tokenizer.json and meta.json {"format": "wanka-shards-v2", "dtype", "tokens", "documents",
"shards": [{"file", "idx", "tokens", "documents", "sha256"}], "tokenizer", "sources", "cleaning"}.
meta.json is written last and atomically: without it the directory is not a data set.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from wanka.data.tokenizer import load_tokenizer
from wanka.errors import SpecError

FORMAT = "wanka-shards-v2"
DTYPES = {"uint16": np.uint16, "uint32": np.uint32}


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


def shard_names(k: int) -> tuple[str, str]:
    return f"shard_{k:05d}.bin", f"shard_{k:05d}.idx"


def write_shard(out: Path, k: int, tokens: np.ndarray, doc_ends: np.ndarray) -> dict:
    """Write shard k atomically (both files renamed into place after fsync); returns its meta entry."""
    entry = {}
    for name, arr in zip(shard_names(k), (tokens, doc_ends.astype("<i8"))):
        tmp = out / (name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(arr.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        entry[name.rsplit(".", 1)[1]] = tmp
    os.replace(entry["bin"], out / shard_names(k)[0])
    os.replace(entry["idx"], out / shard_names(k)[1])
    return {"file": shard_names(k)[0], "idx": shard_names(k)[1], "tokens": int(len(tokens)),
            "documents": int(len(doc_ends)), "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()}


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


class TokenShards:
    """All shards of a prepared directory as one read-only token stream (memory-mapped)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        meta_file = self.path / "meta.json"
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, json.JSONDecodeError):
            raise SpecError("data", "a directory made by `wanka data prepare` (with meta.json)", str(self.path)) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise SpecError("data.format", f"{FORMAT} (re-run `wanka data prepare`)",
                            meta.get("format") if isinstance(meta, dict) else meta, source=str(meta_file))
        if meta.get("dtype") not in DTYPES:
            raise SpecError("data.dtype", f"one of {', '.join(DTYPES)}", meta.get("dtype"), source=str(meta_file))
        shards = meta.get("shards")
        if not (isinstance(shards, list) and shards and all(
                isinstance(s, dict) and isinstance(s.get("file"), str) and isinstance(s.get("tokens"), int)
                and s["tokens"] > 0 for s in shards)):
            raise SpecError("data.shards", "a non-empty list of {file, idx, tokens, sha256}", shards, source=str(meta_file))
        if not isinstance(meta.get("tokenizer"), str):
            raise SpecError("data.tokenizer", "a tokenizer file name", meta.get("tokenizer"), source=str(meta_file))
        self.meta = meta
        self.dtype = DTYPES[meta["dtype"]]
        self.tokenizer = load_tokenizer(self.path / meta["tokenizer"])
        parts = []
        for s in meta["shards"]:
            f = self.path / s["file"]
            if not f.is_file() or f.stat().st_size != np.dtype(self.dtype).itemsize * s["tokens"]:
                raise SpecError("data.shards", f"{s['file']} with {s['tokens']} tokens", str(f), source=str(meta_file))
            parts.append(np.memmap(f, dtype=self.dtype, mode="r"))
        self._parts = parts
        self._starts = np.cumsum([0] + [len(p) for p in parts])
        self.tokens = int(self._starts[-1])

    def verify_checksums(self) -> None:
        """SHA-256 of every shard against meta.json (opening checks only sizes). `wanka train` runs it
        once before starting workers: a flipped byte otherwise surfaces as an out-of-range token id
        inside torchrun, after every restart. About 1 s per GB; reads one shard at a time."""
        for s, part in zip(self.meta["shards"], self._parts):
            h = hashlib.sha256()
            for start in range(0, len(part), 1 << 24):
                h.update(np.asarray(part[start : start + (1 << 24)]).tobytes())
            if "sha256" in s and h.hexdigest() != s["sha256"]:
                raise SpecError("data.shards", f"{s['file']} matching its sha256 in meta.json (re-run `wanka data prepare`)",
                                "a checksum mismatch", source=str(self.path / "meta.json"))

    def document_ends(self, k: int) -> np.ndarray:
        """End offsets of shard k's documents (memory-mapped .idx)."""
        return np.memmap(self.path / self.meta["shards"][k]["idx"], dtype="<i8", mode="r")

    def window(self, start: int, length: int) -> np.ndarray:
        """tokens[start : start + length] across shard boundaries, as int64."""
        out = np.empty(length, dtype=np.int64)
        pos, filled = start, 0
        while filled < length:
            k = int(np.searchsorted(self._starts, pos, side="right") - 1)
            off = pos - self._starts[k]
            take = min(length - filled, len(self._parts[k]) - off)
            out[filled : filled + take] = self._parts[k][off : off + take]
            filled += take
            pos += take
        return out
