"""Token shards: text files -> uint16 numpy memmaps (`wanka data prepare`).

A prepared directory holds `shard_00000.bin ...` (raw little-endian uint16 token ids, documents
joined with EOS), `tokenizer.json`, and `meta.json` {"format": "wanka-shards-v1", "tokens",
"shards": [{"file", "tokens", "sha256"}], "tokenizer"}. uint16 caps the vocabulary at 65,536.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from wanka.data.tokenizer import ByteTokenizer, load_tokenizer
from wanka.errors import SpecError

FORMAT = "wanka-shards-v1"


def prepare(inputs: list[Path], out: Path, shard_tokens: int = 1 << 20) -> dict:
    """Tokenise `inputs` (files or directories of *.txt) with the byte tokenizer into `out`."""
    files: list[Path] = []
    for p in inputs:
        p = Path(p)
        if p.is_dir():
            files += sorted(p.glob("*.txt"))
        elif p.is_file():
            files.append(p)
        else:
            raise SpecError("data.input", "an existing text file or directory", str(p))
    if not files:
        raise SpecError("data.input", "at least one .txt file", [str(p) for p in inputs])
    if shard_tokens < 1:
        raise SpecError("data.shard_tokens", "an integer >= 1", shard_tokens)
    tok = ByteTokenizer()
    ids: list[int] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SpecError("data.input", "a UTF-8 text file", "bytes that are not UTF-8", source=str(f)) from None
        if not text:
            raise SpecError("data.input", "a non-empty text file", "an empty file", source=str(f))
        ids += tok.encode(text, eos=True)
    all_ids = np.asarray(ids, dtype=np.uint16)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob("shard_*.bin"):  # a shorter re-prepare must not leave old shards behind
            stale.unlink()
        shards = []
        for n, start in enumerate(range(0, len(all_ids), shard_tokens)):
            part = all_ids[start : start + shard_tokens]
            name = f"shard_{n:05d}.bin"
            part.tofile(out / name)
            shards.append({"file": name, "tokens": int(len(part)), "sha256": hashlib.sha256(part.tobytes()).hexdigest()})
        tok.save(out / "tokenizer.json")
        meta = {"format": FORMAT, "tokens": int(len(all_ids)), "shards": shards, "tokenizer": "tokenizer.json",
                "sources": [f.name for f in files]}
        tmp = out / "meta.json.tmp"  # meta.json last and atomically: without it the directory is not a data set
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, out / "meta.json")
    except OSError as exc:
        raise SpecError("data.out", "a writable directory", f"{out} ({exc.strerror})") from None
    return meta


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
            raise SpecError("data.format", FORMAT, meta.get("format") if isinstance(meta, dict) else meta, source=str(meta_file))
        shards = meta.get("shards")
        if not (isinstance(shards, list) and shards and all(
                isinstance(s, dict) and isinstance(s.get("file"), str) and isinstance(s.get("tokens"), int)
                and s["tokens"] > 0 for s in shards)):
            raise SpecError("data.shards", "a non-empty list of {file, tokens, sha256}", shards, source=str(meta_file))
        if not isinstance(meta.get("tokenizer"), str):
            raise SpecError("data.tokenizer", "a tokenizer file name", meta.get("tokenizer"), source=str(meta_file))
        self.meta = meta
        self.tokenizer = load_tokenizer(self.path / meta["tokenizer"])
        parts = []
        for s in meta["shards"]:
            f = self.path / s["file"]
            if not f.is_file() or f.stat().st_size != 2 * s["tokens"]:
                raise SpecError("data.shards", f"{s['file']} with {s['tokens']} tokens", str(f), source=str(meta_file))
            parts.append(np.memmap(f, dtype=np.uint16, mode="r"))
        self._parts = parts
        self._starts = np.cumsum([0] + [len(p) for p in parts])
        self.tokens = int(self._starts[-1])

    def verify_checksums(self) -> None:
        """SHA-256 of every shard against meta.json (opening checks only sizes). `wanka train` runs it
        once before starting workers: a flipped byte otherwise surfaces as an out-of-range token id
        inside torchrun, after every restart. About 1 s per GB."""
        for s, part in zip(self.meta["shards"], self._parts):
            if "sha256" in s and hashlib.sha256(np.asarray(part).tobytes()).hexdigest() != s["sha256"]:
                raise SpecError("data.shards", f"{s['file']} matching its sha256 in meta.json (re-run `wanka data prepare`)",
                                "a checksum mismatch", source=str(self.path / "meta.json"))

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
