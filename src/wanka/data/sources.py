"""Input sources for `wanka data prepare` and `wanka data tokenizer train`, read as streams of documents.

- `*.txt`: documents are separated by blank lines (one paragraph = one document);
- `*.jsonl`: one JSON object per line, the document in its "text" field;
- `*.parquet`: the "text" column, read one record batch at a time (pyarrow).
A directory stands for its files with these endings, sorted by name. `PATH@WEIGHT` gives a source a
mixture weight (default 1): each kept document is written floor(w) times plus once more with
probability frac(w), decided by a hash of the document, so 0.5 keeps about half of a source and 2
repeats it twice (GPT-3 mixes its sources by such epochs, Brown et al. 2020, Table 2.2).
Memory stays bounded by one document (a txt paragraph stops growing past max_chars + 1: it will be
dropped by the length filter anyway) or one Parquet record batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wanka.errors import SpecError

SUFFIXES = (".txt", ".jsonl", ".parquet")
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Source:
    path: Path
    weight: float = 1.0

    def files(self) -> list[Path]:
        return sorted(f for f in self.path.iterdir() if f.suffix in SUFFIXES) if self.path.is_dir() else [self.path]


def parse_source(text: str) -> Source:
    """"PATH" or "PATH@WEIGHT" -> Source (the path must exist, the weight be > 0)."""
    path, weight = text, 1.0
    if "@" in text:
        path, _, w = text.rpartition("@")
        try:
            weight = float(w)
        except ValueError:
            raise SpecError("data.input", "PATH or PATH@WEIGHT with a number WEIGHT > 0", text) from None
        if not weight > 0 or weight == float("inf"):
            raise SpecError("data.input", "a mixture weight > 0", text)
    p = Path(path)
    if p.is_dir():
        if not Source(p).files():
            raise SpecError("data.input", f"a directory holding {', '.join(SUFFIXES)} files", path)
    elif not p.is_file():
        raise SpecError("data.input", "an existing file or directory", path)
    elif p.suffix not in SUFFIXES:
        raise SpecError("data.input", f"a file ending in {', '.join(SUFFIXES)}", path)
    return Source(p, weight)


def _utf8_lines(f: Path) -> Iterator[str]:
    """The file's lines, decoded strictly: bytes that are not UTF-8 are an input error, not U+FFFD."""
    try:
        with open(f, encoding="utf-8") as fh:
            yield from fh
    except UnicodeDecodeError as exc:
        raise SpecError("data.input", "a UTF-8 text file", f"an undecodable byte at offset {exc.start}",
                        source=str(f)) from None


def _txt_documents(f: Path, max_chars: int) -> Iterator[str]:
    para: list[str] = []
    size = 0
    for line in _utf8_lines(f):
        if line.strip():
            if size <= max_chars:
                para.append(line)
                size += len(line)
        elif para:
            yield "".join(para)
            para, size = [], 0
    if para:
        yield "".join(para)


def _jsonl_documents(f: Path) -> Iterator[str]:
    for n, line in enumerate(_utf8_lines(f), 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line).get("text")
        except (json.JSONDecodeError, AttributeError):
            raise SpecError(f"{f}:{n}", 'a JSON object with a "text" string') from None
        if not isinstance(text, str):
            raise SpecError(f"{f}:{n}.text", "a string", type(text).__name__)
        yield text


def _parquet_documents(f: Path) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f)
    except Exception as exc:  # pyarrow raises ArrowInvalid and friends
        raise SpecError(str(f), "a readable Parquet file", str(exc).splitlines()[0]) from None
    if "text" not in pf.schema_arrow.names:
        raise SpecError(f"{f}.text", 'a string column named "text"', pf.schema_arrow.names)
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=["text"]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield text


def documents(source: Source, max_chars: int = 1 << 20) -> Iterator[str]:
    """Every document of `source`, in file order then position order (deterministic)."""
    for f in source.files():
        if f.suffix == ".txt":
            yield from _txt_documents(f, max_chars)
        elif f.suffix == ".jsonl":
            yield from _jsonl_documents(f)
        else:
            yield from _parquet_documents(f)
