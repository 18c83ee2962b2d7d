"""A closed-loop load generator for any OpenAI-compatible completions endpoint.

For each concurrency level C, C workers send streaming `/v1/completions` requests back to back until
N requests are done. Per request: TTFT (send to first streamed token), latency (send to [DONE]) and
completion tokens (from the usage chunk). Throughput = all completion tokens / wall time of the level.

    wanka loadtest --url http://127.0.0.1:8000 --concurrency 1,8,32 --requests 64 --json
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np

from wanka.cli import positive_int_list
from wanka.errors import SpecError


def parse_concurrency(text: str) -> list[int]:
    return positive_int_list(text, "--concurrency", "1,8,32")


async def _one(client: httpx.AsyncClient, body: dict) -> dict:
    start = time.perf_counter()
    ttft, tokens = None, 0
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            try:
                err = resp.json()["error"]
                message, param = str(err["message"]), err.get("param")
            except (ValueError, KeyError, TypeError):
                message, param = resp.text[:200], None
            return {"error": resp.status_code, "message": message, "param": param}
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and ttft is None:
                ttft = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return {"ttft_s": ttft, "latency_s": time.perf_counter() - start, "tokens": tokens}


async def _level(url: str, headers: dict, body: dict, concurrency: int, requests: int) -> dict:
    results: list[dict] = []
    todo = iter(range(requests))

    async def worker(client):
        for _ in todo:  # the shared iterator hands each request to exactly one worker
            results.append(await _one(client, body))

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall_s = time.perf_counter() - start
    ok = [r for r in results if "error" not in r]
    failed = [r for r in results if "error" in r]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    lat = [r["latency_s"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)

    def pct(xs, q):
        return float(np.percentile(xs, q)) if xs else None

    return {"concurrency": concurrency, "requests": len(results), "errors": len(results) - len(ok),
            "wall_s": wall_s, "completion_tokens": tokens, "tokens_per_s": tokens / wall_s,
            "requests_per_s": len(ok) / wall_s, "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
            "latency_p50_s": pct(lat, 50), "latency_p99_s": pct(lat, 99),
            "first_error": f"HTTP {failed[0]['error']}: {failed[0]['message']}" if failed else None,
            "_first_error_param": failed[0].get("param") if failed else None}


def run_loadtest(url: str, levels: list[int], requests: int, max_tokens: int = 32,
                 prompt: str = "The cluster has ten thousand cards and", api_key: str | None = None,
                 model: str | None = None) -> dict:
    if not url.startswith(("http://", "https://")):
        raise SpecError("--url", "an http:// or https:// URL", url)
    if requests < 1 or max_tokens < 1:
        raise SpecError("--requests" if requests < 1 else "--max-tokens", "a positive integer",
                        requests if requests < 1 else max_tokens)
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
    rows = [asyncio.run(_level(url, headers, body, c, requests)) for c in levels]
    params = [r.pop("_first_error_param") for r in rows]
    if all(r["errors"] == r["requests"] for r in rows):  # nothing got through: say why, exit 2
        flag = {"max_tokens": "--max-tokens", "model": "--url"}.get(params[0], "--url")
        raise SpecError(flag, "requests the server completes", rows[0]["first_error"])
    return {"url": url, "model": model, "max_tokens": max_tokens, "levels": rows}
