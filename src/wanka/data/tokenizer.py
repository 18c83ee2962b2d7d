"""Tokenizers shared by training and serving, saved as one JSON file (tokenizer.json).

The byte-level tokenizer maps UTF-8 bytes to ids 0-255 and adds BOS and EOS; it needs no
training and round-trips any text. A trained byte-level BPE (wanka.data.bpe) is saved in the
Hugging Face `tokenizers` format instead; `load_tokenizer` tells the two apart ({"type": "byte"}
versus a "model" object) so callers never need to know which one they hold.
"""

from __future__ import annotations

import json
from pathlib import Path

from wanka.errors import SpecError


class ByteTokenizer:
    type = "byte"

    def __init__(self) -> None:
        self.bos_id = 256
        self.eos_id = 257
        self.vocab_size = 258

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        ids = list(text.encode("utf-8"))
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    def token_bytes(self, token: int) -> bytes:
        """The bytes token `token` stands for (b"" for BOS/EOS)."""
        return bytes([token]) if 0 <= token < 256 else b""

    def to_json(self) -> dict:
        return {"type": self.type, "bos_id": self.bos_id, "eos_id": self.eos_id, "vocab_size": self.vocab_size}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2))


def load_tokenizer(path: str | Path):
    """Read a tokenizer.json written by `save` (ByteTokenizer or BPETokenizer); a bad file is a one-line SpecError."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise SpecError("tokenizer", "a readable tokenizer.json", str(path)) from None
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "byte":
        return ByteTokenizer()
    if isinstance(data, dict) and isinstance(data.get("model"), dict):
        from wanka.data.bpe import BPETokenizer

        return BPETokenizer.from_file(path)
    raise SpecError("tokenizer.type", 'one of: byte, or a Hugging Face tokenizers file (with "model")', kind, source=str(path))
