"""Drive the engine from one background thread and hand results to asyncio handlers.

HTTP handlers call `submit()` from the event loop; the thread admits new requests, runs
`engine.step()` while there is work (torch releases the GIL in its kernels, so the event loop keeps
serving), and pushes each `Delta` into the request's asyncio queue with `call_soon_threadsafe`.
`stop()` lets the requests in flight finish first (graceful drain) unless told not to.
"""

from __future__ import annotations

import asyncio
import threading
import time

from wanka.serve.engine import Delta, Engine, QueueFull, Request
from wanka.serve.metrics import ServeMetrics


class EngineRunner:
    def __init__(self, engine: Engine, metrics: ServeMetrics):
        self.engine, self.metrics = engine, metrics
        self._cond = threading.Condition()
        self._inbox: list[tuple[Request, asyncio.AbstractEventLoop, asyncio.Queue]] = []
        self._aborts: list[Request] = []
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="wanka-engine", daemon=True)
        self.error: BaseException | None = None
        self._preempted = self._prefix_hits = 0  # engine counts already in the metrics

    def start(self) -> None:
        self._thread.start()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._inbox) + len(self._sinks)

    def submit(self, req: Request) -> asyncio.Queue:
        """Queue `req`; its Deltas arrive on the returned queue. Raises QueueFull (HTTP 429)."""
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        with self._cond:
            waiting = self.engine.waiting_for_slot(arriving=len(self._inbox))
            if waiting >= self.engine.config.max_queue:
                self.metrics.rejected.inc()
                raise QueueFull(f"{waiting} requests waiting (max_queue {self.engine.config.max_queue})")
            req.arrival_s = time.perf_counter()
            self._inbox.append((req, loop, queue))
            self._cond.notify()
        return queue

    def abort(self, req: Request) -> None:
        with self._cond:
            self._aborts.append(req)
            self._cond.notify()

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._inbox or self._aborts or self.engine.has_work() or self._stopping):
                        self._cond.wait()
                    if self._stopping and not (self._inbox or self.engine.has_work()):
                        return
                    for req, loop, queue in self._inbox:
                        try:
                            self.engine.add_request(req)
                        except (QueueFull, ValueError) as exc:  # the HTTP layer checks first; belt and braces
                            loop.call_soon_threadsafe(queue.put_nowait, exc)
                            continue
                        self._sinks[req.id] = (loop, queue)
                    self._inbox.clear()
                    aborts, self._aborts = self._aborts, []
                for req in aborts:
                    self.engine.abort(req)
                    self._sinks.pop(req.id, None)
                self._dispatch(self.engine.step())
        except BaseException as exc:  # a bug in the engine: fail every waiting request, keep the trace
            self.error = exc
            for loop, queue in list(self._sinks.values()):
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            raise

    def _dispatch(self, deltas: list[Delta]) -> None:
        e = self.engine
        c = e.cache
        preempted, self._preempted = e.preemptions - self._preempted, e.preemptions
        hits, self._prefix_hits = e.prefix_hit_tokens - self._prefix_hits, e.prefix_hit_tokens
        self.metrics.observe_step(e.last_batch_size, len(deltas), len(e.waiting), len(e.running),
                                  c.used_blocks / c.blocks, preempted, hits)
        for d in deltas:
            sink = self._sinks.get(d.request.id)
            if d.finished:
                self.metrics.observe_finish(d.request)
                with self._cond:
                    self._sinks.pop(d.request.id, None)
            if sink is not None:
                loop, queue = sink
                loop.call_soon_threadsafe(queue.put_nowait, d)
