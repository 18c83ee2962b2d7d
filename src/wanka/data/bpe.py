"""Byte-level BPE tokenizers in the Hugging Face `tokenizers` format (tokenizer.json).

`train_bpe` learns merges with `tokenizers`' BpeTrainer over a stream of documents (Sennrich et al.
2016, arXiv:1508.07909; byte-level alphabet as in GPT-2, Radford et al. 2019, section 2.2), so no
text is ever out of vocabulary. `BPETokenizer` wraps any byte-level tokenizer.json - trained here,
or the byte tokenizer re-expressed as one (`byte_tokenizer_json`) for a Hugging Face export - with
the interface of wanka.data.tokenizer.ByteTokenizer (encode/decode/bos_id/eos_id/vocab_size,
token_bytes for streaming decode in the server).

Special tokens: "<s>" (BOS) and "</s>" (EOS), the Llama names.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from wanka.errors import SpecError

BOS, EOS = "<s>", "</s>"


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what tokenizers' ByteLevel uses): printable
    Latin-1 bytes map to themselves, the other 68 bytes to chr(256 + n) in order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_CHARS = _byte_chars()
CHAR_BYTES = {c: b for b, c in BYTE_CHARS.items()}


class BPETokenizer:
    type = "bpe"

    def __init__(self, tokenizer, source: str = "tokenizer.json"):
        self.tok = tokenizer
        ids = {name: tokenizer.token_to_id(name) for name in (BOS, EOS)}
        missing = [n for n, i in ids.items() if i is None]
        if missing:
            raise SpecError("tokenizer.added_tokens", f'special tokens "{BOS}" and "{EOS}"', f"no {missing[0]}", source=source)
        self.bos_id, self.eos_id = ids[BOS], ids[EOS]
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        tokenizer.encode_special_tokens = True  # "<s>" typed in a text is text, never a BOS id
        self._special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}

    @classmethod
    def from_file(cls, path: str | Path) -> "BPETokenizer":
        from tokenizers import Tokenizer

        data = json.loads(Path(path).read_text())
        if (data.get("pre_tokenizer") or {}).get("type") != "ByteLevel" or (data.get("decoder") or {}).get("type") != "ByteLevel":
            raise SpecError("tokenizer.pre_tokenizer", "a byte-level BPE tokenizer.json (ByteLevel pre-tokenizer and decoder)",
                            (data.get("pre_tokenizer") or {}).get("type"), source=str(path))
        try:
            return cls(Tokenizer.from_file(str(path)), str(path))
        except Exception as exc:  # tokenizers raises its own Exception type for a malformed file
            raise SpecError("tokenizer", "a valid tokenizer.json", str(exc).splitlines()[0], source=str(path)) from None

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        ids = self.tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def token_bytes(self, token: int) -> bytes:
        """The UTF-8 bytes token `token` stands for (b"" for special tokens): the server decodes a
        stream incrementally, so a character split over two tokens comes out whole."""
        piece = self.tok.id_to_token(token)
        if piece is None or piece in self._special:
            return b""
        return bytes(CHAR_BYTES[c] for c in piece if c in CHAR_BYTES)

    def save(self, path: str | Path) -> None:
        self.tok.save(str(path))


def byte_tokenizer_json() -> str:
    """wanka's byte tokenizer (ids 0-255 = bytes, 256 = <s>, 257 = </s>) as a tokenizers BPE with
    no merges: encodes every text to exactly the byte tokenizer's ids (tested)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {BYTE_CHARS[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(BOS, special=True), AddedToken(EOS, special=True)])
    return tok.to_str()


def train_bpe(texts: Iterable[str], vocab: int, min_frequency: int = 2) -> BPETokenizer:
    """Learn a byte-level BPE of `vocab` ids (256 bytes + 2 specials + merges) from `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if not 258 < vocab <= 1 << 20:
        raise SpecError("vocab", "an integer in 259..1048576 (256 bytes + <s> + </s> + at least one merge)", vocab)
    tok = Tokenizer(models.BPE())
    # GPT-2's regex split (letters, digits, punctuation, spaces kept apart), then bytes -> characters.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=min_frequency, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return BPETokenizer(tok)
