"""One HTTP generation call -> engine requests -> one response or one event stream.

A completions call with P prompts and n samples becomes P * n engine requests submitted together
(runner.submit: all or none), so they are batched by the engine like any other concurrent requests
and the n samples of a prompt share its prefix blocks (prefix caching). Their Deltas arrive on one
queue; choice `index` = prompt * n + sample. When the caller goes away (a closed stream, a cancelled
handler) every unfinished request of the call is aborted, which frees its KV blocks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from wanka.serve import responses as R
from wanka.serve.engine import QueueFull, Request
from wanka.serve.logprobs import TokenLogprob, chat_logprobs, completion_logprobs

RETRY_AFTER_S = 1   # Retry-After hint on a 429 (an assumption: one engine step frees places far sooner)


class HttpError(Exception):
    def __init__(self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        self.status, self.body, self.headers = status, R.error_body(message, type_, param, code), headers


def busy(message: str) -> HttpError:
    return HttpError(429, f"server busy: {message}; retry later", "rate_limit_error", code="rate_limit_exceeded",
                     headers={"Retry-After": str(RETRY_AFTER_S)})


@dataclass
class Call:
    """The engine requests of one HTTP call and what the response needs to know about them."""

    reqs: list[Request]
    prompt_tokens: int                 # each prompt counted once, however many samples it has
    chat: bool
    logprobs: bool
    model: str
    tokenizer: object
    rid: str = ""
    texts: dict[int, list[str]] = field(default_factory=dict)
    pending: dict[int, list[TokenLogprob]] = field(default_factory=dict)  # logprobs of held-back text

    def usage(self) -> dict:
        return R.usage(self.prompt_tokens, sum(len(r.output_ids) for r in self.reqs))

    def format_logprobs(self, entries: list[TokenLogprob]) -> dict | None:
        if not self.logprobs:
            return None
        return chat_logprobs(self.tokenizer, entries) if self.chat else completion_logprobs(self.tokenizer, entries)


def submit(runner, call: Call):
    call.rid = R.new_id("chatcmpl" if call.chat else "cmpl")
    try:
        return runner.submit(call.reqs)
    except QueueFull as exc:
        raise busy(str(exc)) from None


async def _next(queue):
    item = await queue.get()
    if isinstance(item, QueueFull):  # lost a race for the last queue place inside the engine thread
        raise busy(str(item))
    if isinstance(item, BaseException):
        raise HttpError(503, f"engine failed: {item}", "server_error", code="engine_failed")
    return item


def _abort_unfinished(runner, call: Call) -> None:
    for req in call.reqs:
        if req.finish_reason is None:
            runner.abort(req)


async def collect(runner, call: Call, queue) -> dict:
    """Wait for every request of the call; the whole response object."""
    left = len(call.reqs)
    try:
        while left:
            delta = await _next(queue)
            call.texts.setdefault(delta.request.index, []).append(delta.text)
            left -= delta.finished
    finally:
        if left:  # the client went away or the handler was cancelled
            _abort_unfinished(runner, call)
    choice = R.chat_choice if call.chat else R.completion_choice
    choices = [choice(r.index, "".join(call.texts.get(r.index, [])), r.finish_reason, call.format_logprobs(r.logprobs))
               for r in sorted(call.reqs, key=lambda r: r.index)]
    build = R.chat_object if call.chat else R.completion_object
    return build(call.rid, call.model, choices, call.usage())


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def stream(runner, call: Call, queue, include_usage: bool):
    """Server-Sent Events: a chunk per new text of a choice (its logprobs with it), then [DONE]."""
    left = len(call.reqs)
    try:
        if call.chat:
            for r in call.reqs:
                yield _sse(R.chat_chunk(call.rid, call.model, r.index, {"role": "assistant", "content": ""}, None))
        while left:
            try:
                delta = await _next(queue)
            except HttpError as exc:
                yield _sse(exc.body)
                break
            req = delta.request
            left -= delta.finished
            entries = call.pending.pop(req.index, []) + delta.logprobs
            if not delta.text and not delta.finished:   # an incomplete character or a partial stop: wait
                call.pending[req.index] = entries
                continue
            finish = req.finish_reason if delta.finished else None
            logprobs = call.format_logprobs(entries) if entries else None
            if call.chat:
                body = {"content": delta.text} if delta.text else {}
                yield _sse(R.chat_chunk(call.rid, call.model, req.index, body, finish, logprobs))
            else:
                choice = R.completion_choice(req.index, delta.text, finish, logprobs)
                yield _sse(R.completion_object(call.rid, call.model, [choice], None))
        if include_usage and not left:
            yield _sse(R.usage_chunk(call.rid, call.model, call.chat, call.usage()))
        yield "data: [DONE]\n\n"
    finally:
        if left:
            _abort_unfinished(runner, call)
