"""Log-probabilities of generated tokens, and their two OpenAI shapes.

The values are the model's own: log-softmax of the raw logits over the tokenizer's ids (before
temperature and top-p, as vLLM v1 returns them by default: vllm/v1/sample/sampler.py, whose
`logprobs_mode` defaults to "raw_logprobs", computes them first, before any logits processing). The model's padding ids past the tokenizer's vocabulary can never be sampled
and are left out of the softmax.

Legacy completions (OpenAI API reference, "The completion object", `logprobs`):
    {"tokens": [str], "token_logprobs": [float], "top_logprobs": [{str: float}], "text_offset": [int]}
Chat completions (OpenAI API reference, "The chat completion object", `choices[].logprobs`):
    {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": None}

A token's string is its text when its bytes are a whole UTF-8 text, else `bytes:\\xe4` (OpenAI's
legacy completions have been seen to name partial-character tokens so; no API documents a rule:
vLLM returns U+FFFD, DeepSeek `\\xe4`, as standardcompletions/rfcs issue #2 compares). Distinct bytes
keep distinct keys in a top_logprobs dict; the chat shape also gives the exact bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LOGPROBS = 20   # top alternatives per token at most (OpenAI's chat `top_logprobs` limit)


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]]   # the k most likely ids and their logprobs, most likely first
    text_offset: int               # characters of the completion text before this token's text


def token_logprob(logits: torch.Tensor, token: int, k: int, text_offset: int) -> TokenLogprob:
    """logits [vocab] (the tokenizer's ids) -> the sampled token's logprob and the top k."""
    lp = torch.log_softmax(logits.double(), dim=-1)
    values, ids = lp.topk(k) if k else (lp[:0], lp[:0].long())
    return TokenLogprob(token, float(lp[token]), list(zip(ids.tolist(), values.tolist())), text_offset)


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes a token contributes to the text (byte tokenizer: ids 0-255; BOS/EOS none)."""
    return bytes([token]) if 0 <= token < 256 else b""


def token_string(tokenizer, token: int) -> str:
    if token == tokenizer.eos_id:
        return "<|eos|>"
    if token == tokenizer.bos_id:
        return "<|bos|>"
    raw = token_bytes(tokenizer, token)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def completion_logprobs(tokenizer, entries: list[TokenLogprob]) -> dict:
    """The legacy completions shape (text_offset counts from the start of the completion text)."""
    return {"tokens": [token_string(tokenizer, e.token) for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{token_string(tokenizer, t): lp for t, lp in e.top} for e in entries],
            "text_offset": [e.text_offset for e in entries]}


def _chat_entry(tokenizer, token: int, logprob: float) -> dict:
    return {"token": token_string(tokenizer, token), "logprob": logprob, "bytes": list(token_bytes(tokenizer, token))}


def chat_logprobs(tokenizer, entries: list[TokenLogprob]) -> dict:
    return {"content": [{**_chat_entry(tokenizer, e.token, e.logprob),
                         "top_logprobs": [_chat_entry(tokenizer, t, lp) for t, lp in e.top]} for e in entries],
            "refusal": None}
