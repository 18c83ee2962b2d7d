"""Drive the engine from one background thread and hand results to asyncio handlers.

HTTP handlers call `submit()` from the event loop with the requests of one HTTP call (several for a
prompt list or n > 1); the thread admits them, runs `engine.step()` while there is work (torch
releases the GIL in its kernels, so the event loop keeps serving), and pushes each `Delta` into the
call's asyncio queue with `call_soon_threadsafe`. `stop()` lets the requests in flight finish first
(graceful drain) unless told not to.

Explicit synchronisation, for tests and operators: `hold()` stops stepping (requests are still
admitted and aborted), `release(steps)` lets `steps` more steps run (all, when None), and
`wait_until(predicate)` returns once the predicate holds over the runner, re-checked after every
submit, abort and step, so no caller needs to poll or sleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

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
        self._steps_allowed: int | None = None   # None: step freely; n: n more steps, then hold
        self.steps = 0                           # engine steps run so far
        self.rejected = 0                        # submissions refused with QueueFull
        self._thread = threading.Thread(target=self._loop, name="wanka-engine", daemon=True)
        self.error: BaseException | None = None
        self._preempted = self._prefix_hits = 0  # engine counts already in the metrics

    def start(self) -> None:
        self._thread.start()

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._inbox) + len(self._sinks)

    def submit(self, reqs: list[Request]) -> asyncio.Queue:
        """Queue `reqs` (all or none); their Deltas arrive on the returned queue. Raises QueueFull
        (HTTP 429) when they would take the waiting queue past max_queue."""
        loop, queue = asyncio.get_running_loop(), asyncio.Queue()
        with self._cond:
            waiting = self.engine.waiting_for_slot(arriving=len(self._inbox) + len(reqs))
            if waiting > self.engine.config.max_queue:
                self.metrics.rejected.inc()
                self.rejected += 1
                self._cond.notify_all()
                raise QueueFull(f"{waiting} requests would wait (max_queue {self.engine.config.max_queue})")
            now = time.perf_counter()
            for req in reqs:
                req.arrival_s = now
                self._inbox.append((req, loop, queue))
            self._cond.notify_all()
        return queue

    def abort(self, req: Request) -> None:
        with self._cond:
            self._aborts.append(req)
            self._cond.notify_all()

    def hold(self) -> None:
        """Stop stepping after the current step; admissions and aborts still happen."""
        with self._cond:
            self._steps_allowed = 0

    def release(self, steps: int | None = None) -> None:
        """Run `steps` more engine steps and hold again (None: step freely)."""
        with self._cond:
            self._steps_allowed = steps
            self._cond.notify_all()

    def wait_until(self, predicate: Callable[["EngineRunner"], bool], timeout_s: float = 60.0) -> bool:
        """Block until `predicate(self)` holds (checked under the runner's lock after each event);
        False if it still does not after `timeout_s` (a guard against a hang, not a timing)."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self) or self.error is not None, timeout_s) \
                and self.error is None

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._cond:
            self._stopping = True
            self._steps_allowed = None
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _may_step(self) -> bool:
        return self.engine.has_work() and self._steps_allowed != 0

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._inbox or self._aborts or self._may_step() or self._stopping):
                        self._cond.wait()
                    if self._stopping and not (self._inbox or self.engine.has_work()):
                        return
                    self._admit()
                    for req in self._aborts:
                        self.engine.abort(req)
                        self._sinks.pop(req.id, None)
                    self._aborts.clear()
                    step = self._may_step()
                    if step and self._steps_allowed is not None:
                        self._steps_allowed -= 1
                    self._cond.notify_all()
                if step:
                    deltas = self.engine.step()
                    with self._cond:
                        self._dispatch(deltas)
                        self.steps += 1
                        self._cond.notify_all()
        except BaseException as exc:  # a bug in the engine: fail every waiting request, keep the trace
            with self._cond:
                self.error = exc
                for loop, queue in list(self._sinks.values()):
                    loop.call_soon_threadsafe(queue.put_nowait, exc)
                self._cond.notify_all()
            raise

    def _admit(self) -> None:
        for req, loop, queue in self._inbox:
            try:
                self.engine.add_request(req)
            except (QueueFull, ValueError) as exc:  # the HTTP layer checks first; belt and braces
                loop.call_soon_threadsafe(queue.put_nowait, exc)
                continue
            self._sinks[req.id] = (loop, queue)
        self._inbox.clear()

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
                self._sinks.pop(d.request.id, None)
            if sink is not None:
                loop, queue = sink
                loop.call_soon_threadsafe(queue.put_nowait, d)
