"""The shipped corpus, prepared on first use into a cache directory."""

from __future__ import annotations

import os
from pathlib import Path

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare
from wanka.data.shards import FORMAT


def cache_dir() -> Path:
    return Path(os.environ.get("WANKA_CACHE", Path.home() / ".cache" / "wanka"))


def default_data() -> Path:
    """Prepared shards of the shipped corpus (seed.txt + generated text); built once."""
    out = cache_dir() / "data" / "corpus-v2"
    if (out / "meta.json").is_file() and FORMAT in (out / "meta.json").read_text():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    files = write_corpus(tmp / "text")
    prepare(files, tmp)
    if not (out / "meta.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(tmp, out)
        except OSError:  # another process won the race; its copy is identical
            pass
    return out
