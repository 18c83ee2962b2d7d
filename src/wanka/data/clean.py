"""Cleaning for `wanka data prepare`: normalisation, quality filters, exact and near-duplicate keys.

- Normalisation: Unicode NFC (composed characters: "e" + U+0301 and "é" become one string), control
  characters other than newline and tab removed, surrounding whitespace stripped.
- Filters: length in [min_chars, max_chars]; a share of whitespace-separated words that contain a
  letter >= min_word_letters. Gopher's rules (Rae et al. 2021, arXiv:2112.11446, appendix A.1.1)
  use 80% for English web text; wanka's default is 0.5 because its shipped corpus is arithmetic.
- Exact duplicates: an 8-byte BLAKE2b of the normalised text.
- Near duplicates: MinHash (Broder 1997) over 5-gram shingles of lower-cased words, NUM_PERM = 64 hash functions
  h_k(x) = (a_k x + b_k mod 2^64) >> 32 (multiply-shift, Dietzfelbinger et al. 1997), cut into
  BANDS = 8 bands of ROWS = 8 (LSH banding, Leskovec, Rajaraman & Ullman, "Mining of Massive
  Datasets" section 3.4): two documents of Jaccard similarity s share a band with probability
  1 - (1 - s^8)^8 (0.99 at s = 0.9, 0.55 at s = 0.77, 0.03 at s = 0.5). A document that shares a
  band with an earlier kept document is dropped (no pairwise Jaccard check: the band collision is
  the decision, as in datatrove's and Megatron's MinHash dedup).
- Memory: `KeySet` stores 8-byte keys in an open-addressing numpy table at most half full, so the
  whole dedup state costs 16-32 B x (1 + BANDS) = 144-288 B per kept document (the table is 1/4
  to 1/2 full between doublings), whatever its length.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib
from dataclasses import dataclass

import numpy as np

NUM_PERM, BANDS, ROWS, SHINGLE_WORDS = 64, 8, 8, 5
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LETTER_WORD = re.compile(r"(?<!\S)\S*?[^\W\d_]\S*")  # a whitespace-separated word with a letter in it
_rng = np.random.default_rng(20240601)  # fixed: signatures must agree across runs and processes
_A = _rng.integers(1, 1 << 63, NUM_PERM, dtype=np.uint64) | np.uint64(1)  # odd multipliers
_B = _rng.integers(0, 1 << 63, NUM_PERM, dtype=np.uint64)
_BAND_MIX = _rng.integers(1, 1 << 63, (BANDS, ROWS), dtype=np.uint64) | np.uint64(1)
_SHINGLE_MIX = np.array([0x9E3779B97F4A7C15 ** (j + 1) % (1 << 64) for j in range(SHINGLE_WORDS)], dtype=np.uint64)


@dataclass(frozen=True)
class CleanConfig:
    min_chars: int = 16
    max_chars: int = 1 << 20
    min_word_letters: float = 0.5
    near_dedup: bool = True

    def to_dict(self) -> dict:
        return {"min_chars": self.min_chars, "max_chars": self.max_chars,
                "min_word_letters": self.min_word_letters, "near_dedup": self.near_dedup}


def normalize(text: str) -> str:
    return _CONTROL.sub("", unicodedata.normalize("NFC", text)).strip()


def quality_reason(text: str, cfg: CleanConfig) -> str | None:
    """Why `text` (normalised) fails the filters, or None."""
    if len(text) < cfg.min_chars:
        return "too_short"
    if len(text) > cfg.max_chars:
        return "too_long"
    with_letter = len(_LETTER_WORD.findall(text))
    if with_letter < cfg.min_word_letters * len(text.split()):
        return "few_letters"
    return None


def exact_key(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8, person=b"wanka-exact").digest(), "little")


def word_hashes(text: str) -> np.ndarray:
    """CRC-32 of every whitespace-separated word of lower(text) (deterministic across processes,
    unlike Python's salted hash())."""
    return np.array([zlib.crc32(w.encode()) for w in text.lower().split()] or [0], dtype=np.uint64)


def band_keys(text: str) -> np.ndarray:
    """BANDS uint64 LSH keys of `text`'s MinHash signature (band index mixed in)."""
    wh = word_hashes(text)
    n = max(1, len(wh) - SHINGLE_WORDS + 1)
    with np.errstate(over="ignore"):
        if len(wh) < SHINGLE_WORDS:
            shingles = (wh * _SHINGLE_MIX[: len(wh)]).sum(keepdims=True)
        else:
            shingles = sum(wh[j : j + n] * _SHINGLE_MIX[j] for j in range(SHINGLE_WORDS))
        signature = ((shingles[:, None] * _A[None, :] + _B[None, :]) >> np.uint64(32)).min(axis=0)
        rows = signature.reshape(BANDS, ROWS)
        return (rows * _BAND_MIX).sum(axis=1) + np.arange(BANDS, dtype=np.uint64)


class KeySet:
    """A set of uint64 keys in a numpy open-addressing table (linear probing, <= 50% full)."""

    def __init__(self, capacity: int = 1 << 16):
        self.table = np.zeros(capacity, dtype=np.uint64)
        self.count = 0

    @staticmethod
    def _fix(key: int) -> int:
        return key or 1  # 0 marks an empty slot

    def _slot(self, key: int) -> int:
        mask = len(self.table) - 1
        i = (key * 0x9E3779B97F4A7C15 >> 20) & mask
        table = self.table
        while True:
            k = int(table[i])
            if k == 0 or k == key:
                return i
            i = (i + 1) & mask

    def __contains__(self, key: int) -> bool:
        key = self._fix(int(key))
        return int(self.table[self._slot(key)]) == key

    def add(self, key: int) -> None:
        key = self._fix(int(key))
        i = self._slot(key)
        if int(self.table[i]) == key:
            return
        self.table[i] = key
        self.count += 1
        if 2 * self.count > len(self.table):
            old = self.table[self.table != 0]
            self.table = np.zeros(2 * len(self.table), dtype=np.uint64)
            self.count = 0
            for k in old.tolist():
                self.table[self._slot(k)] = k
                self.count += 1
