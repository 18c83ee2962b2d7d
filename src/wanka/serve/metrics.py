"""Prometheus metrics of the server, in their own registry (one per app, so tests can start many).

Names follow Prometheus conventions (base units: seconds; `_total` counters). TTFT is arrival to
first generated token, including queueing; TPOT is (finish - first token) / (output tokens - 1).
"""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServeMetrics:
    def __init__(self, window_s: float = 10.0):
        r = self.registry = CollectorRegistry()
        self.ttft = Histogram("wanka_serve_time_to_first_token_seconds", "arrival to first token", registry=r,
                              buckets=LATENCY_BUCKETS_S)
        self.tpot = Histogram("wanka_serve_time_per_output_token_seconds", "decode time per output token",
                              registry=r, buckets=LATENCY_BUCKETS_S)
        self.latency = Histogram("wanka_serve_request_latency_seconds", "arrival to finish", registry=r,
                                 buckets=LATENCY_BUCKETS_S)
        self.queue_depth = Gauge("wanka_serve_queue_depth", "requests waiting for a batch slot", registry=r)
        self.running = Gauge("wanka_serve_running_requests", "requests in the running batch", registry=r)
        self.batch_size = Histogram("wanka_serve_batch_size", "sequences per engine step", registry=r,
                                    buckets=BATCH_BUCKETS)
        self.tokens_per_s = Gauge("wanka_serve_generation_tokens_per_second",
                                  f"generated tokens per second over the last {window_s:g} s", registry=r)
        self.generated = Counter("wanka_serve_generation_tokens", "generated tokens", registry=r)
        self.prompt = Counter("wanka_serve_prompt_tokens", "prompt tokens", registry=r)
        self.finished = Counter("wanka_serve_requests", "finished requests", ["finish_reason"], registry=r)
        self.rejected = Counter("wanka_serve_rejected_requests", "requests rejected (queue full)", registry=r)
        self.kv_usage = Gauge("wanka_serve_kv_cache_usage_ratio", "KV-cache blocks in use / all blocks", registry=r)
        self.preemptions = Counter("wanka_serve_preemptions", "running requests preempted for KV blocks "
                                   "(recomputed later)", registry=r)
        self.prefix_hits = Counter("wanka_serve_prefix_cache_hit_tokens", "prompt positions taken from the "
                                   "prefix cache instead of computed", registry=r)
        self._window_s = window_s
        self._recent: deque[tuple[float, int]] = deque()

    def observe_step(self, batch_size: int, new_tokens: int, waiting: int, running: int,
                     kv_usage: float = 0.0, preempted: int = 0, prefix_hits: int = 0) -> None:
        now = time.monotonic()
        self.kv_usage.set(kv_usage)
        self.preemptions.inc(preempted)
        self.prefix_hits.inc(prefix_hits)
        self.batch_size.observe(batch_size)
        self.generated.inc(new_tokens)
        self.queue_depth.set(waiting)
        self.running.set(running)
        self._recent.append((now, new_tokens))
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()
        span = max(now - self._recent[0][0], 1e-3) if len(self._recent) > 1 else self._window_s
        self.tokens_per_s.set(sum(n for _, n in self._recent) / span)

    def observe_finish(self, req) -> None:
        self.finished.labels(req.finish_reason).inc()
        self.prompt.inc(len(req.prompt_ids))
        if req.first_token_s is not None:
            self.ttft.observe(req.first_token_s - req.arrival_s)
            self.latency.observe(req.finish_s - req.arrival_s)
            if len(req.output_ids) > 1:
                self.tpot.observe((req.finish_s - req.first_token_s) / (len(req.output_ids) - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)
