"""Graceful shutdown: a stream in flight finishes in full; new connections are refused.

Synchronised on events: the engine is held with the stream two tokens in, the server is told to
stop, and only once its shutdown has begun (`Server.stopping`) is the engine released."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from wanka.serve.server import build_state, start_server


def test_shutdown_drains_the_stream_in_flight(long_dir):
    body = {"model": "tiny", "prompt": "drain", "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    state = build_state(long_dir)
    runner = state.runner
    with start_server(state) as srv:
        lines = []

        def consume():
            with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=120) as resp:
                lines.extend(resp.iter_lines())

        runner.hold()
        reader = threading.Thread(target=consume)
        reader.start()
        assert runner.wait_until(lambda r: r.in_flight == 1)
        steps = runner.steps
        runner.release(steps=2)                                  # the prompt and one more token
        assert runner.wait_until(lambda r: r.steps == steps + 2)
        stopper = threading.Thread(target=srv.stop)              # like SIGTERM: stop accepting, drain, stop
        stopper.start()
        assert srv.server.stopping.wait(60)                      # shutdown has begun, the stream is mid-way
        assert len(runner.engine.running) == 1
        runner.release()
        stopper.join(120)
        reader.join(120)
        with pytest.raises(httpx.ConnectError):
            httpx.get(srv.url + "/health", timeout=30)
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    usage = json.loads(data[-2][6:])["usage"]
    assert usage["completion_tokens"] == 400
    finishes = [json.loads(d[6:])["choices"][0]["finish_reason"] for d in data[:-2]]
    assert finishes[-1] == "length"
