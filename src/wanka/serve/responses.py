"""OpenAI-shaped response objects: completions, chat, their stream chunks, usage, errors.

A response holds one choice per (prompt, sample): `index` = prompt * n + sample, as vLLM numbers
them. Usage counts each prompt once and every choice's tokens (vLLM's OpenAIServingCompletion).
"""

from __future__ import annotations

import time
import uuid


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _head(rid: str, obj: str, model: str) -> dict:
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model}


def completion_choice(index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def completion_object(rid: str, model: str, choices: list[dict], use: dict | None) -> dict:
    """A whole completion (use given) or one stream chunk (use None: no usage key)."""
    out = {**_head(rid, "text_completion", model), "choices": choices}
    if use is not None:
        out["usage"] = use
    return out


def chat_choice(index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict:
    return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish}


def chat_object(rid: str, model: str, choices: list[dict], use: dict) -> dict:
    return {**_head(rid, "chat.completion", model), "choices": choices, "usage": use}


def chat_chunk(rid: str, model: str, index: int, delta: dict, finish: str | None,
               logprobs: dict | None = None) -> dict:
    return {**_head(rid, "chat.completion.chunk", model),
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def usage_chunk(rid: str, model: str, chat: bool, use: dict) -> dict:
    """The last stream chunk when stream_options.include_usage: no choices, the usage."""
    return {**_head(rid, "chat.completion.chunk" if chat else "text_completion", model), "choices": [], "usage": use}


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    """The OpenAI error envelope."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
