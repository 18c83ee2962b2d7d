"""The corpus wanka ships: `seed.txt` (a few paragraphs written for this project) plus a
deterministic generator of simple English sentences about clusters and arithmetic, so that a tiny
model has something learnable without any download."""

from __future__ import annotations

import random
from pathlib import Path

SEED_TEXT = Path(__file__).with_name("seed.txt")

_NOUNS = ["cluster", "node", "switch", "rack", "job", "model", "checkpoint", "gradient", "token", "pipeline"]
_VERBS = ["trains", "saves", "loads", "sends", "waits for", "restarts", "schedules", "shards", "measures"]
_ADJ = ["fast", "slow", "large", "small", "healthy", "busy", "idle", "new", "old", "warm"]


def generate(n_sentences: int = 20000, seed: int = 0) -> str:
    """~n_sentences short sentences; same seed -> same text."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_sentences):
        kind = rng.randrange(3)
        if kind == 0:
            a, b = rng.randrange(100), rng.randrange(100)
            out.append(f"{a} plus {b} is {a + b}.")
        elif kind == 1:
            out.append(f"the {rng.choice(_ADJ)} {rng.choice(_NOUNS)} {rng.choice(_VERBS)} the {rng.choice(_NOUNS)}.")
        else:
            n = rng.randrange(1, 9)
            out.append(f"{n} nodes with 8 gpus each hold {8 * n} gpus.")
    return " ".join(out) + "\n"


def write_corpus(dst: Path, n_sentences: int = 20000, seed: int = 0) -> list[Path]:
    """Write seed.txt and the generated text into `dst` (a directory); returns the files."""
    dst.mkdir(parents=True, exist_ok=True)
    files = [dst / "seed.txt", dst / "generated.txt"]
    files[0].write_text(SEED_TEXT.read_text())
    files[1].write_text(generate(n_sentences, seed))
    return files
