"""The HTTP surface: FastAPI routes in the OpenAI shape, plus /health and /metrics.

    GET  /health                 {"status": "ok", ...}
    GET  /metrics                Prometheus text (metrics.py)
    GET  /v1/models              {"object": "list", "data": [{"id": MODEL, "object": "model", ...}]}
    POST /v1/completions         {"model", "prompt", "max_tokens", "temperature", "top_p", "seed", "stop", "stream"}
    POST /v1/chat/completions    {"model", "messages": [{"role", "content"}], ...}

Errors use the OpenAI envelope {"error": {"message", "type", "param", "code"}}: 400 for a bad body
(the message and `param` name the field), 401 without the API key, 404 for an unknown model,
429 when the queue is full, 503 while the engine is down. Streams are Server-Sent Events ending in
`data: [DONE]`.
"""

from __future__ import annotations

import hmac
import json
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from wanka.errors import SpecError
from wanka.serve import protocol as P
from wanka.serve.engine import QueueFull, Request
from wanka.serve.metrics import ServeMetrics
from wanka.serve.runner import EngineRunner


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


class HttpError(Exception):
    def __init__(self, status: int, message: str, type_: str, param: str | None = None, code: str | None = None):
        self.status, self.body = status, P.error_body(message, type_, param, code)


def _error(status: int, message: str, type_: str, param=None, code=None) -> JSONResponse:
    return JSONResponse(P.error_body(message, type_, param, code), status_code=status)


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
        return JSONResponse(exc.body, status_code=exc.status)

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
        body = P.parse_body(P.CompletionRequest, await _json(request))
        prompt_ids = state.tokenizer.encode(body.prompt, bos=True)
        req = _make_request(state, body, prompt_ids, "prompt", default_max_tokens=16)
        return await _respond(state, body, req, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: HttpRequest):
        body = P.parse_body(P.ChatRequest, await _json(request))
        prompt_ids = state.tokenizer.encode(P.chat_prompt(body.messages), bos=True)
        req = _make_request(state, body, prompt_ids, "messages", default_max_tokens=None, chat=True)
        return await _respond(state, body, req, chat=True)

    return app


async def _json(request: HttpRequest) -> object:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SpecError("body", "valid JSON") from None


def _make_request(state: ServeState, body, prompt_ids: list[int], prompt_field: str,
                  default_max_tokens: int | None, chat: bool = False) -> Request:
    if body.model != state.model_id:
        raise HttpError(404, f"model: expected {state.model_id!r} (see /v1/models), got {body.model!r}",
                        "invalid_request_error", "model", "model_not_found")
    room = state.context_len - len(prompt_ids)
    if room < 1:
        raise SpecError(prompt_field, f"at most {state.context_len - 1} tokens (context {state.context_len})",
                        f"{len(prompt_ids)} tokens")
    max_tokens = body.max_tokens or min(default_max_tokens or room, room)
    if max_tokens > room:
        raise SpecError("max_tokens", f"at most {room} (context {state.context_len} - {len(prompt_ids)} prompt tokens)",
                        max_tokens)
    return Request(prompt_ids, body.sampling(max_tokens, (P.CHAT_STOP,) if chat else ()))


def _submit(state: ServeState, req: Request):
    try:
        return state.runner.submit(req)
    except QueueFull as exc:
        raise HttpError(429, f"server busy: {exc}; retry later", "rate_limit_error", code="rate_limit_exceeded") from None


async def _next(queue):
    item = await queue.get()
    if isinstance(item, QueueFull):  # lost a race for the last queue place inside the engine thread
        raise HttpError(429, f"server busy: {item}; retry later", "rate_limit_error", code="rate_limit_exceeded")
    if isinstance(item, BaseException):
        raise HttpError(503, f"engine failed: {item}", "server_error", code="engine_failed")
    return item


async def _respond(state: ServeState, body, req: Request, chat: bool):
    queue = _submit(state, req)
    rid = P.new_id("chatcmpl" if chat else "cmpl")
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(_stream(state, req, queue, rid, chat, include_usage), media_type="text/event-stream")
    text, done = [], False
    try:
        while not done:
            delta = await _next(queue)
            text.append(delta.text)
            done = delta.finished
    finally:
        if not done:  # the client went away or the handler was cancelled
            state.runner.abort(req)
    use = P.usage(len(req.prompt_ids), len(req.output_ids))
    if chat:
        return P.chat_object(rid, state.model_id, "".join(text), req.finish_reason, use)
    return P.completion_object(rid, state.model_id, "".join(text), req.finish_reason, use)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _stream(state: ServeState, req: Request, queue, rid: str, chat: bool, include_usage: bool):
    model, done = state.model_id, False
    try:
        if chat:
            yield _sse(P.chat_chunk(rid, model, {"role": "assistant", "content": ""}, None))
        while not done:
            try:
                delta = await _next(queue)
            except HttpError as exc:
                yield _sse(exc.body)
                break
            done = delta.finished
            finish = req.finish_reason if done else None
            if not delta.text and not done:
                continue
            if chat:
                yield _sse(P.chat_chunk(rid, model, {"content": delta.text} if delta.text else {}, finish))
            else:
                yield _sse(P.completion_object(rid, model, delta.text, finish, None, chunk=True))
        if include_usage and done:
            use = P.usage(len(req.prompt_ids), len(req.output_ids))
            if chat:
                yield _sse(P.chat_chunk(rid, model, {}, None, use, no_choices=True))
            else:
                yield _sse({"id": rid, "object": "text_completion", "created": int(time.time()),
                            "model": model, "choices": [], "usage": use})
        yield "data: [DONE]\n\n"
    finally:
        if not done:
            state.runner.abort(req)
