"""OpenAI-shaped request bodies, their validation, and the chat template (responses.py builds replies).

Shapes follow the OpenAI API reference (Completions, Chat Completions, Models) as vLLM's
OpenAI-compatible server also serves them, plus vLLM's /tokenize and /detokenize. Unknown fields are
ignored, as OpenAI-compatible servers do; fields we cannot honour (penalties, logit_bias, echo,
suffix, best_of > 1, tools) are rejected with a 400 naming them rather than silently ignored. Types
are checked strictly, as OpenAI does: `"max_tokens": "5"`, `"max_tokens": true` or `"stream": "yes"`
are 400s, not coerced (an integer is still a valid float); NaN and Infinity (which Python's JSON
parser accepts) are 400s naming the field. Chat takes `max_completion_tokens` (OpenAI's current
name) as well as the older `max_tokens`.

A completions `prompt` is a string, a list of strings, a list of token ids or a list of lists of
token ids (OpenAI's four forms); each prompt gets `n` choices, indexed prompt * n + sample.
`logprobs` is an integer 0..20 on completions (top alternatives per token) and a boolean plus
`top_logprobs` 0..20 on chat, as in the OpenAI reference.

Chat template (byte tokenizer, no special role tokens): BOS, then one line per message
`"{role}: {content}\n"`, then `"assistant:"`; generation also stops at `"\nuser:"`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from wanka.errors import SpecError, from_pydantic
from wanka.serve.logprobs import MAX_LOGPROBS
from wanka.serve.sampling import SamplingParams

CHAT_STOP = "\nuser:"
MAX_N = 16          # choices per prompt at most (the whole request must also fit the server's queue)
MAX_PROMPTS = 64    # prompts in one completions request at most
PROMPT_FORMS = "a string, a list of strings, a list of token ids or a list of lists of token ids"


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=MAX_N)
    seed: int | None = None
    stop: object = None               # a string or up to 4 strings; checked by _stops (one message for both)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: object = None
    user: str | None = None
    ignore_eos: bool = False          # vLLM's extension: keep generating past EOS (for load tests)

    @field_validator("logit_bias", "presence_penalty", "frequency_penalty")
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

    def top_logprobs_wanted(self) -> int | None:
        raise NotImplementedError

    def sampling(self, max_tokens: int, sample: int = 0, extra_stop: tuple[str, ...] = ()) -> SamplingParams:
        """Sample j of n draws with seed + j, so seeded choices are reproducible yet differ."""
        return SamplingParams(max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                              seed=None if self.seed is None else self.seed + sample,
                              stop=list(self.stop or []) + list(extra_stop), ignore_eos=self.ignore_eos,
                              logprobs=self.top_logprobs_wanted())


class CompletionRequest(_Sampling):
    prompt: object = Field()          # one of PROMPT_FORMS; checked by _prompt_forms
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("echo", "suffix", "best_of")
    @classmethod
    def _unsupported_here(cls, v):
        if v is True or (v and type(v) is not bool and v != 1):   # True == 1 in Python: echo true is refused
            raise ValueError("to be left out (not supported by this server)")
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt_forms(cls, v):
        def ids(x):
            return isinstance(x, list) and bool(x) and all(type(t) is int for t in x)

        if isinstance(v, str) or ids(v):
            return v
        if isinstance(v, list) and v and (all(isinstance(p, str) for p in v) or all(ids(p) for p in v)):
            if len(v) > MAX_PROMPTS:
                raise ValueError(f"at most {MAX_PROMPTS} prompts in one request, got {len(v)}")
            return v
        raise ValueError(PROMPT_FORMS + " (none empty)")

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each a string or a list of token ids."""
        v = self.prompt
        return [v] if isinstance(v, str) or (v and type(v[0]) is int) else list(v)

    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list | None = None
    max_completion_tokens: int | None = Field(default=None, gt=0)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: expected to come with \"logprobs\": true, got logprobs false")
        return self

    def top_logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

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


class TokenizeRequest(_Body):
    """vLLM's /tokenize: a prompt or chat messages -> token ids."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    add_special_tokens: bool = True   # BOS first, as completions and chat do

    @model_validator(mode="after")
    def _one_input(self):
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("prompt: expected exactly one of \"prompt\" (a string) or \"messages\" (a list)")
        return self

    def text(self) -> str:
        return self.prompt if self.prompt is not None else chat_prompt(self.messages)


class DetokenizeRequest(_Body):
    """vLLM's /detokenize: token ids -> text."""

    model: str | None = None
    tokens: list[int]


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
