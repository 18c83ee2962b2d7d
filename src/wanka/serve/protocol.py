"""OpenAI-shaped request bodies, their validation, the chat template, and response objects.

Shapes follow the OpenAI API reference (Completions, Chat Completions, Models) as vLLM's
OpenAI-compatible server also serves them. Unknown fields are ignored, as OpenAI-compatible servers
do; fields we cannot honour (logprobs, penalties, n > 1, ...) are rejected with a 400 naming them
rather than silently ignored. Types are checked strictly, as OpenAI does: `"max_tokens": "5"`,
`"max_tokens": true` or `"stream": "yes"` are 400s, not coerced (an integer is still a valid float).
Chat takes `max_completion_tokens` (OpenAI's current name) as well as the older `max_tokens`.

Chat template (byte tokenizer, no special role tokens): BOS, then one line per message
`"{role}: {content}\n"`, then `"assistant:"`; generation also stops at `"\nuser:"`.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wanka.errors import SpecError, from_pydantic
from wanka.serve.sampling import SamplingParams

CHAT_STOP = "\nuser:"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: Literal[1] = 1
    seed: int | None = None
    stop: object = None               # a string or up to 4 strings; checked by _stops (one message for both)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: object = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: object = None
    user: str | None = None
    ignore_eos: bool = False          # vLLM's extension: keep generating past EOS (for load tests)

    @field_validator("logprobs", "logit_bias", "presence_penalty", "frequency_penalty")
    @classmethod
    def _unsupported(cls, v):
        if v:  # None, False, 0, {} are the defaults: fine
            raise ValueError("to be left out (not supported by this server)")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else (v if v is not None else [])
        if not isinstance(stops, list) or len(stops) > 4 or any(not isinstance(s, str) or not s for s in stops):
            raise ValueError("a non-empty string or a list of up to 4 non-empty strings")
        return stops

    def sampling(self, max_tokens: int, extra_stop: tuple[str, ...] = ()) -> SamplingParams:
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                              seed=self.seed, stop=list(self.stop or []) + list(extra_stop),
                              ignore_eos=self.ignore_eos)


class CompletionRequest(_Sampling):
    prompt: str
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("echo", "suffix", "best_of")
    @classmethod
    def _unsupported_here(cls, v):
        if v and v != 1:
            raise ValueError("to be left out (not supported by this server)")
        return v


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list | None = None
    max_completion_tokens: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _max_completion_tokens(self):
        if self.max_completion_tokens is not None:
            if self.max_tokens is not None and self.max_tokens != self.max_completion_tokens:
                raise ValueError("max_completion_tokens: expected the same value as max_tokens when both are given, "
                                 f"got {self.max_completion_tokens} and {self.max_tokens}")
            self.max_tokens = self.max_completion_tokens
        return self

    @field_validator("tools")
    @classmethod
    def _no_tools(cls, v):
        if v:
            raise ValueError("to be left out (tool calls are not supported)")
        return v


def parse_body(cls: type[_Body], body: object) -> _Body:
    """Validate a JSON body; the first problem becomes a SpecError naming the field."""
    if not isinstance(body, dict):
        raise SpecError("body", "a JSON object", type(body).__name__)
    try:
        return cls.model_validate(body, strict=True)
    except ValidationError as exc:
        raise from_pydantic(exc) from None


def chat_prompt(messages: list[ChatMessage]) -> str:
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_object(rid: str, model: str, text: str, finish: str | None, use: dict | None,
                      chunk: bool = False) -> dict:
    out = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    if use is not None or not chunk:
        out["usage"] = use
    return out


def chat_object(rid: str, model: str, text: str, finish: str | None, use: dict) -> dict:
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": None, "finish_reason": finish}],
            "usage": use}


def chat_chunk(rid: str, model: str, delta: dict, finish: str | None, use: dict | None = None,
               no_choices: bool = False) -> dict:
    out = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
           "choices": [] if no_choices else [{"index": 0, "delta": delta, "logprobs": None,
                                              "finish_reason": finish}]}
    if use is not None:
        out["usage"] = use
    return out


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    """The OpenAI error envelope."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
