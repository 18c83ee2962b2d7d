"""Build a server from an export directory, and run it (in this thread, or in a background one).

    state = build_state("runs/export", quantize="int8")
    with start_server(state) as server:      # 127.0.0.1, a free port
        httpx.get(server.url + "/v1/models")
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from wanka.errors import SpecError
from wanka.serve.app import MAX_BODY_BYTES, ServeState, create_app
from wanka.serve.engine import Engine, EngineConfig
from wanka.serve.export import load_export
from wanka.serve.metrics import ServeMetrics
from wanka.serve.model import InferenceModel
from wanka.serve.quantize import quantize_int8, weight_bytes
from wanka.serve.runner import EngineRunner

GRACEFUL_SHUTDOWN_S = 30
# Idle keep-alive connections close after this long. uvicorn's default (5 s) equals httpx's pool
# keepalive_expiry (5 s, httpx docs "Resource limits"), which the OpenAI client and `wanka loadtest`
# use: a client could then reuse a connection in the very moment the server closes it, and the
# request fails with a read error (a soak of 64 streams saw 2 in 633 once). Longer than the client's
# expiry, the client always drops the idle connection first.
KEEP_ALIVE_S = 15


def build_state(export_dir, quantize: str | None = None, max_batch: int = 32, max_queue: int = 256,
                max_batched_tokens: int = 512, api_key: str | None = None, block_size: int = 64,
                kv_blocks: int | None = None, prefix_caching: bool = True,
                max_body_bytes: int = MAX_BODY_BYTES) -> ServeState:
    if quantize not in (None, "none", "int8"):
        raise SpecError("--quantize", "int8 or none", quantize)
    for flag, value in (("--max-batch", max_batch), ("--max-queue", max_queue),
                        ("--max-batched-tokens", max_batched_tokens), ("--block-size", block_size),
                        ("--kv-blocks", 1 if kv_blocks is None else kv_blocks), ("--max-body-bytes", max_body_bytes)):
        if value < 1:
            raise SpecError(flag, "a positive integer", value)
    export = load_export(export_dir)
    model = InferenceModel.from_tensors(export.spec, export.tensors)
    fp32_bytes = weight_bytes(model)
    backend = quantize_int8(model) if quantize == "int8" else None
    if kv_blocks is not None and kv_blocks * block_size < model.max_len:
        raise SpecError("--kv-blocks", f"at least {-(-model.max_len // block_size)} blocks of {block_size} "
                        f"(one {model.max_len}-token context)", kv_blocks)
    engine = Engine(model, export.tokenizer,
                    EngineConfig(max_batch, max_queue, max_batched_tokens, block_size, kv_blocks, prefix_caching))
    metrics = ServeMetrics()
    info = {"quantization": f"int8 ({backend})" if backend else "none", "weight_bytes": weight_bytes(model),
            "fp32_weight_bytes": fp32_bytes, "kv_cache_bytes": engine.cache.nbytes, "step": export.step,
            "max_batch": max_batch, "max_queue": max_queue, "kv_blocks": engine.cache.blocks,
            "block_size": block_size, "prefix_caching": prefix_caching, "max_body_bytes": max_body_bytes}
    return ServeState(EngineRunner(engine, metrics), export.tokenizer, export.spec.name, model.max_len, metrics,
                      api_key, int(time.time()), info, max_body_bytes)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket. It is made with proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on
    sockets whose proto says TCP, and without it Nagle holds each streamed chunk until the client's
    delayed ACK (~40 ms on Linux), so tokens on a keep-alive connection arrived in one burst."""
    if not 0 <= port <= 65535:
        raise SpecError("--port", "an integer in 0..65535 (0 picks a free port)", port)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0][0]
    except socket.gaierror as exc:
        raise SpecError("--host", "a local address or host name", f"{host} ({exc.strerror})") from None
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        field = "--port" if exc.errno == errno.EADDRINUSE else "--host"
        raise SpecError(field, "a free port on an address of this machine", f"{host}:{port} ({exc.strerror})") from None
    # Listen now, not when uvicorn's loop starts: the URL is announced (and clients may connect) as
    # soon as this returns; connections wait in the backlog instead of being refused.
    sock.listen(2048)
    return sock


class Server(uvicorn.Server):
    """uvicorn's server with events for the moments callers wait on, instead of polling its flags:
    `ready` (start-up is over: serving, or `should_exit` when it failed) and `stopping` (shutdown
    has begun: no new connections; the requests in flight drain)."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.ready, self.stopping = threading.Event(), threading.Event()

    async def startup(self, sockets=None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()

    async def shutdown(self, sockets=None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def make_server(state: ServeState, host: str = "127.0.0.1", port: int = 0) -> tuple[Server, socket.socket]:
    sock = bind_socket(host, port)
    config = uvicorn.Config(create_app(state), log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                            timeout_keep_alive=KEEP_ALIVE_S)
    return Server(config), sock


@dataclass
class ServerHandle:
    server: Server
    thread: threading.Thread
    url: str

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop accepting, drain requests in flight, stop the engine."""
        self.server.should_exit = True
        self.thread.join(timeout_s)


@contextmanager
def start_server(state: ServeState, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 20.0):
    server, sock = make_server(state, host, port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="wanka-uvicorn")
    thread.start()
    if not server.ready.wait(startup_timeout_s) or not server.started:
        server.should_exit = True
        raise RuntimeError("uvicorn did not start")
    handle = ServerHandle(server, thread, f"http://{host}:{sock.getsockname()[1]}")
    try:
        yield handle
    finally:
        handle.stop()
        sock.close()
