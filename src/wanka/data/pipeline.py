"""`wanka data prepare`: sources -> cleaning -> dedup -> tokens in worker processes -> indexed shards.

Streaming and bounded memory: documents are read one at a time (sources.py), sent to a pool of
worker processes in batches with at most 2 x workers + 1 batches in flight, and the main process
keeps only the current shard's tokens (<= shard_tokens + one document) and the dedup key sets
(clean.py: 144-288 B per kept document). Workers normalise, filter, compute the exact and MinHash band
keys and tokenise; the main process takes the dedup decisions in input order, so the output does
not depend on the number of workers.

Resume after a kill (even kill -9): a shard is the commit unit. After shard k's .bin/.idx are
renamed into place, `.progress/keys_0000k.npy` (the dedup keys added since shard k-1) and then
`.progress/state.json` (cursor = next document, counters, shard list) are replaced atomically. A
re-run with the same inputs and options (same fingerprint) deletes anything past the last committed
shard, reloads the key sets, skips to the cursor and carries on; documents are handled identically,
so the shards are byte-identical to an uninterrupted run. Other options start from scratch.
"""

from __future__ import annotations

import collections
import hashlib
import json
import multiprocessing
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wanka.data.clean import BANDS, CleanConfig, KeySet, band_keys, exact_key, normalize, quality_reason
from wanka.data.shards import FORMAT, token_dtype, write_json_atomic, write_shard
from wanka.data.sources import Source, documents, parse_source
from wanka.data.tokenizer import ByteTokenizer, load_tokenizer
from wanka.errors import SpecError

BATCH_DOCS = 64
HOLD_ENV = "WANKA_PREPARE_HOLD_AT_SHARD"  # test hook: stop (block) after writing shard N, before its commit


# ---- worker side -------------------------------------------------------------------------------
_W: dict = {}


def _init_worker(tokenizer_file: str | None, clean: dict, dtype: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per worker: `--workers` is the parallelism
    _W["tok"] = load_tokenizer(tokenizer_file) if tokenizer_file else ByteTokenizer()
    _W["clean"] = CleanConfig(**clean)
    _W["dtype"] = dtype


def _process(texts: list[str]) -> list[tuple]:
    """Per document: (reason,) when filtered, else (None, exact key, band keys, token ids + EOS)."""
    tok, cfg, dtype = _W["tok"], _W["clean"], _W["dtype"]
    out: list[tuple] = []
    kept: list[str] = []
    for text in texts:
        text = normalize(text)
        reason = quality_reason(text, cfg)
        if reason:
            out.append((reason,))
            continue
        bands = band_keys(text) if cfg.near_dedup else np.zeros(0, dtype=np.uint64)
        out.append((None, exact_key(text), bands, None))
        kept.append(text)
    if isinstance(tok, ByteTokenizer):
        ids = [np.frombuffer(t.encode(), dtype=np.uint8) for t in kept]
    else:
        ids = [np.asarray(i, dtype=np.int64) for i in tok.encode_batch(kept)]
    it = iter(ids)
    for n, r in enumerate(out):
        if r[0] is None:
            out[n] = (None, r[1], r[2], np.append(next(it), tok.eos_id).astype(dtype))
    return out


# ---- main side ---------------------------------------------------------------------------------
@dataclass
class _Progress:
    fingerprint: str
    cursor: list[int] = field(default_factory=lambda: [0, 0])  # [source index, document index]
    shards: list[dict] = field(default_factory=list)
    stats: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "cursor": self.cursor, "shards": self.shards, "stats": self.stats}


def _copies(weight: float, key: int) -> int:
    """floor(w) copies, plus one with probability frac(w) decided by the document's hash."""
    whole = int(weight)
    return whole + (1 if (key >> 11) / float(1 << 53) < weight - whole else 0)


def _fingerprint(sources: list[Source], tok_bytes: bytes, shard_tokens: int, clean: CleanConfig) -> str:
    files = [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for s in sources for f in s.files()]
    blob = json.dumps({"sources": [[str(s.path.resolve()), s.weight] for s in sources], "files": files,
                       "tokenizer": hashlib.sha256(tok_bytes).hexdigest(), "shard_tokens": shard_tokens,
                       "clean": clean.to_dict(), "format": FORMAT})
    return hashlib.sha256(blob.encode()).hexdigest()


def _start(out: Path, fingerprint: str, n_sources: int) -> tuple[_Progress, KeySet, KeySet]:
    prog_dir = out / ".progress"
    state_file = prog_dir / "state.json"
    state = None
    if state_file.is_file():
        try:
            state = json.loads(state_file.read_text())
        except (OSError, json.JSONDecodeError):
            state = None
    exact, near = KeySet(), KeySet()
    if state and state.get("fingerprint") == fingerprint:
        prog = _Progress(fingerprint, state["cursor"], state["shards"], state["stats"])
        for k in range(len(prog.shards)):
            keys = np.load(prog_dir / f"keys_{k:05d}.npy")
            for e in keys[:, 0].tolist():
                exact.add(e)
            for b in keys[:, 1:].ravel().tolist():
                near.add(b)
    else:
        shutil.rmtree(prog_dir, ignore_errors=True)
        prog = _Progress(fingerprint, stats=[collections.Counter() for _ in range(n_sources)])
    committed = {s["file"] for s in prog.shards} | {s["idx"] for s in prog.shards}
    for stale in list(out.glob("shard_*")) + [out / "meta.json"]:
        if stale.name not in committed:
            stale.unlink(missing_ok=True)
    prog_dir.mkdir(parents=True, exist_ok=True)
    prog.stats = [collections.Counter(s) for s in prog.stats]
    return prog, exact, near


def _batches(sources: list[Source], cursor: list[int], max_chars: int):
    """(source index, first document index, texts) from the cursor on."""
    for si in range(cursor[0], len(sources)):
        skip = cursor[1] if si == cursor[0] else 0
        batch, first = [], skip
        for di, text in enumerate(documents(sources[si], max_chars)):
            if di < skip:
                continue
            batch.append(text)
            if len(batch) == BATCH_DOCS:
                yield si, first, batch
                batch, first = [], di + 1
        if batch:
            yield si, first, batch


def _results(pool, sources, cursor, max_chars, workers: int):
    """Results in input order, at most 2 x workers + 1 batches in flight."""
    pending: collections.deque = collections.deque()
    for si, first, texts in _batches(sources, cursor, max_chars):
        if pool is None:
            yield si, first, _process(texts)
            continue
        pending.append((si, first, pool.apply_async(_process, (texts,))))
        if len(pending) > 2 * workers:
            s, f, r = pending.popleft()
            yield s, f, r.get()
    while pending:
        s, f, r = pending.popleft()
        yield s, f, r.get()


def prepare(inputs: list, out: Path, shard_tokens: int = 1 << 20, tokenizer: str | Path | None = None,
            workers: int = 0, clean: CleanConfig | None = None) -> dict:
    """Prepare `inputs` (paths, "PATH@WEIGHT" strings or Sources) into indexed shards in `out`
    (workers=0: tokenise in this process; the CLI defaults to one worker process). An input error
    leaves nothing behind: an output directory this call created is removed again."""
    created = not Path(out).exists()
    try:
        return _prepare(inputs, Path(out), shard_tokens, tokenizer, workers, clean)
    except SpecError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _check_some_document(sources: list[Source], clean: CleanConfig) -> None:
    """Read the sources up to their first document that passes the filters (a valid corpus stops at
    once; an empty, undecodable or all-filtered one is refused here, before the output exists)."""
    for source in sources:
        for text in documents(source, clean.max_chars):
            if quality_reason(normalize(text), clean) is None:
                return
    names = ", ".join(Path(s.path).name for s in sources)
    raise SpecError("data.input", "at least one document that passes the filters (--min-chars, --max-chars, "
                    "--min-word-letters)", f"none in {names}")


def _prepare(inputs: list, out: Path, shard_tokens: int, tokenizer: str | Path | None, workers: int,
             clean: CleanConfig | None) -> dict:
    clean = clean or CleanConfig()
    sources = [s if isinstance(s, Source) else parse_source(str(s)) for s in inputs]
    if not sources:
        raise SpecError("data.input", "at least one text, JSONL or Parquet source", inputs)
    if shard_tokens < 1:
        raise SpecError("data.shard_tokens", "an integer >= 1", shard_tokens)
    if workers < 0:
        raise SpecError("data.workers", "an integer >= 0 (0: tokenise in this process)", workers)
    if clean.min_chars < 0 or clean.max_chars < max(1, clean.min_chars) or not 0 <= clean.min_word_letters <= 1:
        raise SpecError("data.filters", "0 <= min-chars <= max-chars and 0 <= min-word-letters <= 1", clean.to_dict())
    tok = load_tokenizer(tokenizer) if tokenizer else ByteTokenizer()
    tok_bytes = Path(tokenizer).read_bytes() if tokenizer else json.dumps(tok.to_json(), indent=2).encode()
    dtype = token_dtype(tok.vocab_size)
    out = Path(out)
    nearest = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not nearest.is_dir():
        raise SpecError("data.out", "a writable directory", f"{out} ({nearest} is not a directory)")
    _check_some_document(sources, clean)  # before anything is written
    try:
        out.mkdir(parents=True, exist_ok=True)
        prog, exact, near = _start(out, _fingerprint(sources, tok_bytes, shard_tokens, clean), len(sources))
    except OSError as exc:
        raise SpecError("data.out", "a writable directory", f"{out} ({exc.strerror})") from None
    hold = int(os.environ.get(HOLD_ENV, "-1"))
    t0 = time.perf_counter()
    buf: list[np.ndarray] = []
    ends: list[int] = []
    new_keys: list[np.ndarray] = []
    filled = 0

    def commit(cursor: list[int]) -> None:
        nonlocal buf, ends, new_keys, filled
        k = len(prog.shards)
        entry = write_shard(out, k, np.concatenate(buf), np.asarray(ends))
        if k == hold:  # the shard's files are in place but not committed: a kill here must be undone
            (out / ".progress" / "held").write_text(str(k))
            while True:
                time.sleep(1)
        keys = np.stack(new_keys) if new_keys else np.zeros((0, 1 + BANDS), dtype=np.uint64)
        tmp = out / ".progress" / f"keys_{k:05d}.tmp.npy"
        np.save(tmp, keys)
        os.replace(tmp, out / ".progress" / f"keys_{k:05d}.npy")
        prog.shards.append(entry)
        prog.cursor = cursor
        write_json_atomic(out / ".progress" / "state.json", prog.to_dict())
        buf, ends, new_keys, filled = [], [], [], 0

    pool = None
    if workers:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold tokenizers threads
        pool = ctx.Pool(workers, _init_worker, (str(tokenizer) if tokenizer else None, clean.to_dict(), dtype))
    else:
        _init_worker(str(tokenizer) if tokenizer else None, clean.to_dict(), dtype)
    try:
        for si, first, results in _results(pool, sources, prog.cursor, clean.max_chars, workers):
            stats = prog.stats[si]
            for j, r in enumerate(results):
                stats["documents"] += 1
                if r[0] is not None:
                    stats[r[0]] += 1
                    continue
                _, ekey, bands, ids = r
                if ekey in exact:
                    stats["exact_duplicates"] += 1
                    continue
                if any(b in near for b in bands.tolist()):
                    stats["near_duplicates"] += 1
                    continue
                exact.add(ekey)
                for b in bands.tolist():
                    near.add(b)
                row = np.zeros(1 + BANDS, dtype=np.uint64)
                row[0] = ekey
                row[1 : 1 + len(bands)] = bands
                new_keys.append(row)
                stats["kept"] += 1
                for _ in range(_copies(sources[si].weight, ekey)):
                    buf.append(ids)
                    filled += len(ids)
                    ends.append(filled)
                    stats["tokens"] += len(ids)
                if filled >= shard_tokens:
                    commit([si, first + j + 1])
        if filled:
            commit([len(sources), 0])
    except OSError as exc:
        raise SpecError("data.out", "a writable directory with room for the shards", f"{out} ({exc.strerror})") from None
    finally:
        if pool is not None:
            pool.terminate()
    if not prog.shards:
        raise SpecError("data.input", "at least one document that passes the filters", [str(s.path) for s in sources])
    (out / "tokenizer.json").write_bytes(tok_bytes)
    meta = {"format": FORMAT, "dtype": dtype, "tokens": sum(s["tokens"] for s in prog.shards),
            "documents": sum(s["documents"] for s in prog.shards), "shards": prog.shards, "tokenizer": "tokenizer.json",
            "sources": [{"path": str(s.path), "weight": s.weight, **dict(st)} for s, st in zip(sources, prog.stats)],
            "cleaning": clean.to_dict(), "seconds": round(time.perf_counter() - t0, 3)}
    write_json_atomic(out / "meta.json", meta)
    shutil.rmtree(out / ".progress", ignore_errors=True)
    return meta
