"""`wanka serve --model DIR` and `wanka loadtest --url URL`.

    wanka serve --model runs/export --quantize int8 --port 8000 --api-key secret
    wanka loadtest --url http://127.0.0.1:8000 --concurrency 1,8,32 --requests 64 --api-key secret
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from rich.console import Console

from wanka.cli import json_flag
from wanka.output import table


def register(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="serve an export directory over an OpenAI-compatible HTTP API")
    s.add_argument("--model", required=True, help="export directory written by `wanka export`")
    s.add_argument("--quantize", choices=["none", "int8"], default="none", help="weight quantization")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    s.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 routes")
    s.add_argument("--max-batch", type=int, default=32, help="running requests at most")
    s.add_argument("--max-queue", type=int, default=256, help="waiting requests before HTTP 429")
    s.add_argument("--max-batched-tokens", type=int, default=512, help="token budget per engine step")
    s.add_argument("--block-size", type=int, default=64, help="token positions per KV-cache block")
    s.add_argument("--kv-blocks", type=int, default=None,
                   help="KV-cache blocks (default: max-batch full-length contexts); fewer blocks than "
                        "running requests need preempts the newest, which recomputes later")
    s.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get HTTP 413")
    s.add_argument("--no-prefix-caching", action="store_true",
                   help="do not reuse the KV blocks of a prefix another request already computed")
    json_flag(s)
    s.set_defaults(func=cmd_serve)

    lt = sub.add_parser("loadtest", help="measure throughput and latency of a running server")
    lt.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    lt.add_argument("--concurrency", default="1,8,32", help="comma-separated levels")
    lt.add_argument("--requests", type=int, default=None,
                    help="requests per concurrency level (default 32, or unbounded with --duration)")
    lt.add_argument("--duration", type=float, default=None,
                    help="seconds per concurrency level (a soak); with --requests, whichever ends first")
    lt.add_argument("--max-tokens", type=int, default=32, help="tokens generated per request")
    lt.add_argument("--api-key", default=None)
    json_flag(lt)
    lt.set_defaults(func=cmd_loadtest)


def cmd_serve(args):
    from wanka.serve.server import build_state, make_server

    state = build_state(args.model, args.quantize, args.max_batch, args.max_queue, args.max_batched_tokens,
                        args.api_key, args.block_size, args.kv_blocks, not args.no_prefix_caching,
                        args.max_body_bytes)
    server, sock = make_server(state, args.host, args.port)
    url = f"http://{args.host}:{sock.getsockname()[1]}"
    info = {"url": url, "model": state.model_id, **(state.info or {})}
    if args.json:
        sys.stdout.write(json.dumps(info) + "\n")
        sys.stdout.flush()
    else:
        sys.stderr.write(f"wanka serve: {state.model_id} ({info['quantization']}) on {url}  (Ctrl-C drains and stops)\n")
    # uvicorn runs in a worker thread and this thread owns the signals: the first SIGINT/SIGTERM stops
    # accepting and drains the requests in flight (exit 0), a second one forces the exit.
    def on_signal(signum, frame):
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="wanka-uvicorn")
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    return 0


def cmd_loadtest(args):
    from wanka.serve.loadtest import parse_concurrency, run_loadtest

    requests = args.requests if args.requests is not None or args.duration is not None else 32
    result = run_loadtest(args.url, parse_concurrency(args.concurrency), requests, args.max_tokens,
                          api_key=args.api_key, duration_s=args.duration)

    def render(console: Console) -> None:
        cols = ["C", "requests", "rejected (429)", "errors", "tokens/s", "req/s", "TTFT p50 ms", "TTFT p99 ms",
                "lat p50 s", "lat p99 s"]

        def ms(v):
            return None if v is None else v * 1e3

        rows = [[r["concurrency"], r["requests"], r["rejected"], r["errors"], r["tokens_per_s"], r["requests_per_s"],
                 ms(r["ttft_p50_s"]), ms(r["ttft_p99_s"]), r["latency_p50_s"], r["latency_p99_s"]]
                for r in result["levels"]]
        console.print(table(f"wanka loadtest {result['url']} ({result['model']}, {result['max_tokens']} tokens each)",
                            cols, rows))
        for r in result["levels"]:
            if r["first_error"]:
                console.print(f"concurrency {r['concurrency']}: {r['errors']} error(s), {r['rejected']} rejected, "
                              f"first: {r['first_error']}",
                              markup=False, highlight=False)

    return result, render
