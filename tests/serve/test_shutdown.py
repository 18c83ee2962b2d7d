"""Graceful shutdown: a stream in flight finishes in full; new connections are refused."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from wanka.serve.server import build_state, start_server


def test_shutdown_drains_the_stream_in_flight(long_dir):
    body = {"model": "tiny", "prompt": "drain", "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    with start_server(build_state(long_dir)) as srv:
        lines, started = [], threading.Event()

        def consume():
            with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=60) as resp:
                for line in resp.iter_lines():
                    lines.append(line)
                    started.set()

        reader = threading.Thread(target=consume)
        reader.start()
        assert started.wait(20)
        srv.stop()  # like SIGTERM: stop accepting, drain, then stop the engine
        reader.join(60)
        with pytest.raises(httpx.ConnectError):
            httpx.get(srv.url + "/health", timeout=2)
    data = [ln for ln in lines if ln.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    usage = json.loads(data[-2][6:])["usage"]
    assert usage["completion_tokens"] == 400
    finishes = [json.loads(d[6:])["choices"][0]["finish_reason"] for d in data[:-2]]
    assert finishes[-1] == "length"
