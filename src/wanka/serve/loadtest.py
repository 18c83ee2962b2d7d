"""A closed-loop load generator for any OpenAI-compatible completions endpoint.

For each concurrency level C, C workers send streaming `/v1/completions` requests back to back until
N requests are done (`--requests`) or, with `--duration S`, until S seconds have passed. Per request:
TTFT (send to first streamed token), latency (send to [DONE]) and completion tokens (from the usage
chunk). Throughput = all completion tokens / wall time of the level. Outcomes are counted apart:
`rejected` (HTTP 429, the server's back-pressure working), `errors` (anything else: another status,
a stream that ends without [DONE] or carries an error event, a broken connection, a timeout).

    wanka loadtest --url http://127.0.0.1:8000 --concurrency 1,8,32 --requests 64 --json
    wanka loadtest --url http://127.0.0.1:8000 --concurrency 64 --duration 60      # a soak
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np

from wanka.cli import positive_int_list
from wanka.errors import SpecError

REQUEST_TIMEOUT_S = 300   # a request that takes longer is counted as an error (a hang), not waited for


def parse_concurrency(text: str) -> list[int]:
    return positive_int_list(text, "--concurrency", "1,8,32")


def _failure(status: int | str, message: str, param: str | None = None) -> dict:
    return {"error": status, "message": message, "param": param}


async def _one(client: httpx.AsyncClient, body: dict) -> dict:
    start = time.perf_counter()
    ttft, tokens, done = None, 0, False
    try:
        async with client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                await resp.aread()
                try:
                    err = resp.json()["error"]
                    return _failure(resp.status_code, str(err["message"]), err.get("param"))
                except (ValueError, KeyError, TypeError):
                    return _failure(resp.status_code, resp.text[:200])
            async for line in resp.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                if not line.startswith("data: ") or done:
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return _failure("stream", str(chunk["error"].get("message")))
                if chunk.get("choices") and ttft is None:
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        detail = f"{exc} ({type(cause).__name__}: {cause})" if cause else str(exc)
        return _failure(type(exc).__name__, f"{detail} after {time.perf_counter() - start:.2f} s, "
                        f"{'in' if ttft is not None else 'before'} the stream")
    if not done:
        return _failure("stream", "the stream ended without [DONE]")
    return {"ttft_s": ttft, "latency_s": time.perf_counter() - start, "tokens": tokens}


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


async def _level(url: str, headers: dict, body: dict, concurrency: int, requests: int | None,
                 duration_s: float | None) -> dict:
    results: list[dict] = []
    sent = 0

    def more(start: float) -> bool:
        nonlocal sent
        if (requests is not None and sent >= requests) or (duration_s is not None
                                                           and time.perf_counter() - start >= duration_s):
            return False
        sent += 1   # the event loop is one thread: no two workers take the same request
        return True

    async def worker(client, start):
        while more(start):
            results.append(await _one(client, body))

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client, start) for _ in range(concurrency)))
        wall_s = time.perf_counter() - start
    ok = [r for r in results if "error" not in r]
    rejected = [r for r in results if r.get("error") == 429]
    failed = [r for r in results if "error" in r and r["error"] != 429]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    lat = [r["latency_s"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    first = (failed or rejected or [None])[0]
    return {"concurrency": concurrency, "requests": len(results), "ok": len(ok), "rejected": len(rejected),
            "errors": len(failed), "wall_s": wall_s, "completion_tokens": tokens, "tokens_per_s": tokens / wall_s,
            "requests_per_s": len(ok) / wall_s, "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99),
            "latency_p50_s": _pct(lat, 50), "latency_p99_s": _pct(lat, 99),
            "first_error": f"HTTP {first['error']}: {first['message']}" if first else None,
            "_first_error_param": first.get("param") if first else None}


def run_loadtest(url: str, levels: list[int], requests: int | None, max_tokens: int = 32,
                 prompt: str = "The cluster has ten thousand cards and", api_key: str | None = None,
                 model: str | None = None, duration_s: float | None = None) -> dict:
    """Run each concurrency level for `requests` requests or `duration_s` seconds (whichever ends first
    when both are given; at least one must be)."""
    if not url.startswith(("http://", "https://")):
        raise SpecError("--url", "an http:// or https:// URL", url)
    for flag, value in (("--requests", requests), ("--max-tokens", max_tokens)):
        if value is not None and value < 1:
            raise SpecError(flag, "a positive integer", value)
    if duration_s is not None and not duration_s > 0:
        raise SpecError("--duration", "a positive number of seconds", duration_s)
    if requests is None and duration_s is None:
        raise SpecError("--requests", "a positive integer (or give --duration)")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = url.rstrip("/")
    try:
        resp = httpx.get(url + "/v1/models", headers=headers, timeout=10)
    except httpx.HTTPError as exc:
        raise SpecError("--url", "a reachable OpenAI-compatible server", f"{url} ({type(exc).__name__})") from None
    if resp.status_code != 200:
        raise SpecError("--url", "a server that answers GET /v1/models with 200 (check --api-key)",
                        f"HTTP {resp.status_code}")
    model = model or resp.json()["data"][0]["id"]
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    rows = [asyncio.run(_level(url, headers, body, c, requests, duration_s)) for c in levels]
    params = [r.pop("_first_error_param") for r in rows]
    if all(r["ok"] == 0 for r in rows):  # nothing got through: say why, exit 2
        flag = {"max_tokens": "--max-tokens", "model": "--url"}.get(params[0], "--url")
        raise SpecError(flag, "requests the server completes", rows[0]["first_error"])
    return {"url": url, "model": model, "max_tokens": max_tokens, "duration_s": duration_s, "levels": rows}
