"""The HTTP surface: FastAPI routes in the OpenAI shape, plus /health and /metrics.

    GET  /health                 {"status": "ok", ...}
    GET  /metrics                Prometheus text (metrics.py)
    GET  /v1/models              {"object": "list", "data": [{"id": MODEL, "object": "model", ...}]}
    POST /v1/completions         {"model", "prompt" (one or a list), "n", "logprobs", "max_tokens", "temperature",
                                  "top_p", "seed", "stop", "stream", "stream_options"}
    POST /v1/chat/completions    {"model", "messages": [{"role", "content"}], "n", "logprobs", "top_logprobs", ...}
    POST /tokenize               {"prompt": str | "messages": [...], "add_special_tokens"} -> {"tokens", "count", "max_model_len"}
    POST /detokenize             {"tokens": [int]} -> {"prompt": str}

Errors use the OpenAI envelope {"error": {"message", "type", "param", "code"}}: 400 for a bad body
(the message and `param` name the field), 401 without the API key, 404 for an unknown model,
413 for a body over `max_body_bytes`, 429 with `Retry-After` when the queue is full, 503 while the
engine is down. Streams are Server-Sent Events ending in `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from wanka.errors import SpecError
from wanka.serve import protocol as P
from wanka.serve.engine import Request
from wanka.serve.generation import Call, HttpError, collect, stream, submit
from wanka.serve.metrics import ServeMetrics
from wanka.serve.responses import error_body
from wanka.serve.runner import EngineRunner

MAX_BODY_BYTES = 1 << 20   # 1 MiB: far above any prompt that fits a context here (a 2048-token prompt is
                           # ~10 KiB of JSON for token ids), far below what a client could make us buffer
DRAIN_FACTOR = 16          # an oversized body is read and dropped up to 16 x the limit, then the connection closes


@dataclass
class ServeState:
    runner: EngineRunner
    tokenizer: object
    model_id: str
    context_len: int
    metrics: ServeMetrics
    api_key: str | None = None
    created: int = 0
    info: dict | None = None          # shown on /health (quantization, weight bytes, ...)
    max_body_bytes: int = MAX_BODY_BYTES


def _error(status: int, message: str, type_: str, param=None, code=None) -> JSONResponse:
    return JSONResponse(error_body(message, type_, param, code), status_code=status)


def create_app(state: ServeState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.runner.start()
        yield
        state.runner.stop()  # uvicorn has already drained the requests in flight

    app = FastAPI(title="wanka serve", lifespan=lifespan)
    app.state.serve = state

    @app.middleware("http")
    async def require_api_key(request: HttpRequest, call_next):
        if state.api_key and request.url.path.startswith("/v1"):
            scheme, _, key = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(key.strip().encode(), state.api_key.encode()):
                return _error(401, "invalid or missing API key: send the header 'Authorization: Bearer KEY'",
                              "invalid_request_error", code="invalid_api_key")
        return await call_next(request)

    @app.exception_handler(HttpError)
    async def _http_error(request, exc: HttpError):
        return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _route_error(request, exc: StarletteHTTPException):  # unknown path (404), wrong method (405)
        what = {404: f"a known route (see /v1/models), got {request.url.path}",
                405: f"a supported method for {request.url.path}, got {request.method}"}
        message = f"{request.method} {request.url.path}: {exc.detail}" if exc.status_code not in what else \
            f"route: expected {what[exc.status_code]}"
        return _error(exc.status_code, message, "invalid_request_error", code=None)

    @app.exception_handler(SpecError)
    async def _spec_error(request, exc: SpecError):
        return _error(400, str(exc), "invalid_request_error", param=exc.field)

    @app.get("/health")
    async def health():
        ok = state.runner.error is None
        body = {"status": "ok" if ok else "engine failed", "model": state.model_id,
                "in_flight": state.runner.in_flight, **(state.info or {})}
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": state.model_id, "object": "model", "created": state.created,
                                            "owned_by": "wanka", "max_model_len": state.context_len}]}

    @app.post("/v1/completions")
    async def completions(request: HttpRequest):
        body = P.parse_body(P.CompletionRequest, await _json(request, state.max_body_bytes))
        prompts = [state.tokenizer.encode(p, bos=True) if isinstance(p, str) else _checked_ids(state, p, "prompt")
                   for p in body.prompts()]
        return await _respond(state, request, body, _make_call(state, body, prompts, "prompt", 16, chat=False))

    @app.post("/v1/chat/completions")
    async def chat(request: HttpRequest):
        body = P.parse_body(P.ChatRequest, await _json(request, state.max_body_bytes))
        prompt_ids = state.tokenizer.encode(P.chat_prompt(body.messages), bos=True)
        return await _respond(state, request, body, _make_call(state, body, [prompt_ids], "messages", None, chat=True))

    @app.post("/tokenize")
    async def tokenize(request: HttpRequest):
        body = P.parse_body(P.TokenizeRequest, await _json(request, state.max_body_bytes))
        _check_model(state, body.model)
        tokens = state.tokenizer.encode(body.text(), bos=body.add_special_tokens)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": state.context_len}

    @app.post("/detokenize")
    async def detokenize(request: HttpRequest):
        body = P.parse_body(P.DetokenizeRequest, await _json(request, state.max_body_bytes))
        _check_model(state, body.model)
        return {"prompt": state.tokenizer.decode(_checked_ids(state, body.tokens, "tokens"))}

    return app


async def _json(request: HttpRequest, limit: int) -> object:
    """The body as JSON; 413 past `limit` bytes, 400 when it is not JSON. An oversized body is read
    on and dropped (up to DRAIN_FACTOR x limit; memory stays at `limit`) so that the client, which
    sends its whole body before it reads, gets the 413 instead of a reset connection."""
    declared = request.headers.get("content-length", "")
    too_big = HttpError(413, f"body: expected at most {limit} bytes", "invalid_request_error", "body",
                        "request_too_large")
    if declared.isdigit() and int(declared) > DRAIN_FACTOR * limit:
        raise too_big
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > DRAIN_FACTOR * limit:
            break
    if size > limit:
        raise too_big
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise SpecError("body", "valid JSON") from None


def _check_model(state: ServeState, model: str | None) -> None:
    if model is not None and model != state.model_id:
        raise HttpError(404, f"model: expected {state.model_id!r} (see /v1/models), got {model!r}",
                        "invalid_request_error", "model", "model_not_found")


def _checked_ids(state: ServeState, ids: list[int], field: str) -> list[int]:
    vocab = state.tokenizer.vocab_size
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise SpecError(field, f"token ids in 0..{vocab - 1}", bad)
    return list(ids)


def _make_call(state: ServeState, body, prompts: list[list[int]], prompt_field: str,
               default_max_tokens: int | None, chat: bool) -> Call:
    _check_model(state, body.model)
    capacity = state.runner.engine.config.max_batch + state.runner.engine.config.max_queue
    if len(prompts) * body.n > capacity:
        raise SpecError("n", f"prompts x n at most {capacity} (max_batch + max_queue of this server)",
                        f"{len(prompts)} x {body.n}")
    reqs = []
    for i, ids in enumerate(prompts):
        room = state.context_len - len(ids)
        if room < 1:
            raise SpecError(prompt_field, f"at most {state.context_len - 1} tokens (context {state.context_len})",
                            f"{len(ids)} tokens")
        max_tokens = body.max_tokens or min(default_max_tokens or room, room)
        if max_tokens > room:
            raise SpecError("max_tokens", f"at most {room} (context {state.context_len} - {len(ids)} prompt tokens)",
                            max_tokens)
        for j in range(body.n):
            extra_stop = (P.CHAT_STOP,) if chat else ()
            reqs.append(Request(ids, body.sampling(max_tokens, j, extra_stop), index=i * body.n + j))
    return Call(reqs, sum(len(p) for p in prompts), chat, body.top_logprobs_wanted() is not None, state.model_id,
                state.tokenizer)


async def _respond(state: ServeState, request: HttpRequest, body, call: Call):
    queue = submit(state.runner, call)
    if body.stream:  # Starlette cancels a stream when its client disconnects (StreamingResponse)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(stream(state.runner, call, queue, include_usage), media_type="text/event-stream")
    # A plain handler is not cancelled on disconnect: watch for it, so the call's requests are
    # aborted (and their KV blocks freed) instead of running on for nobody.
    work = asyncio.ensure_future(collect(state.runner, call, queue))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()   # collect's `finally` aborts every unfinished request of the call
    if work.cancelled():
        return Response(status_code=499)   # nginx's "client closed request"; nobody reads it
    return work.result()


async def _disconnected(request: HttpRequest) -> None:
    """Return when the client has gone (the body has been read, so only http.disconnect comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
