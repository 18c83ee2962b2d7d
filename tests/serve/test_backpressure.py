"""Back-pressure, synchronised on the engine runner (hold / release / wait_until), never on sleeps:
a full queue is 429 with Retry-After, an oversized body is 413, and a client that goes away
mid-stream gives its KV blocks back."""

from __future__ import annotations

import threading

import httpx
import pytest

from wanka.serve.server import build_state, start_server

LONG = {"model": "tiny", "prompt": "x", "max_tokens": 5, "temperature": 0, "ignore_eos": True}


def _error(resp, status):
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_full_queue_is_429_and_queued_requests_still_finish(long_dir):
    """One running place, one waiting place: with the engine held, two requests take them and a third
    is refused at once; released, the two finish whole."""
    state = build_state(long_dir, max_batch=1, max_queue=1)
    with start_server(state) as srv:
        state.runner.hold()
        results = []
        threads = [threading.Thread(target=lambda: results.append(httpx.post(srv.url + "/v1/completions", json=LONG,
                                                                            timeout=120))) for _ in range(2)]
        for t in threads:
            t.start()
        assert state.runner.wait_until(lambda r: r.in_flight == 2)
        resp = httpx.post(srv.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 2})
        err = _error(resp, 429)
        assert err["code"] == "rate_limit_exceeded" and resp.headers["retry-after"] == "1"
        state.runner.release()
        for t in threads:
            t.join(120)
        assert [r.status_code for r in results] == [200, 200]
        assert all(r.json()["usage"]["completion_tokens"] == 5 for r in results)
        assert "wanka_serve_rejected_requests_total 1.0" in httpx.get(srv.url + "/metrics").text


def test_a_request_larger_than_the_server_can_ever_hold_is_400(long_dir):
    with start_server(build_state(long_dir, max_batch=1, max_queue=1)) as srv:
        resp = httpx.post(srv.url + "/v1/completions", json={**LONG, "prompt": ["a", "b"], "n": 2})
        assert _error(resp, 400)["param"] == "n"


@pytest.mark.parametrize("chunked", [False, True])
def test_body_over_the_limit_is_413(tiny_dir, chunked):
    with start_server(build_state(tiny_dir, max_body_bytes=4096)) as srv:
        body = b'{"model": "tiny", "prompt": "' + b"x" * 8000 + b'"}'
        content = iter([body[:3000], body[3000:]]) if chunked else body   # a generator has no Content-Length
        resp = httpx.post(srv.url + "/v1/completions", content=content, timeout=30)
        err = _error(resp, 413)
        assert err["param"] == "body" and "4096" in err["message"]
        small = {"model": "tiny", "prompt": "x" * 100, "max_tokens": 1}
        assert httpx.post(srv.url + "/v1/completions", json=small, timeout=30).status_code == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_client_disconnect_mid_stream_frees_its_kv_blocks(long_dir, path):
    state = build_state(long_dir, max_batch=2, block_size=16)
    runner, engine = state.runner, state.runner.engine
    body = {"model": "tiny", "max_tokens": 400, "temperature": 0, "ignore_eos": True, "stream": True,
            "n": 2, **({"prompt": "x" * 40} if "chat" not in path else {"messages": [{"role": "user", "content": "x"}]})}
    with start_server(state) as srv:
        before = engine.cache.used_blocks
        runner.hold()
        with httpx.Client(base_url=srv.url, timeout=120) as client:
            with client.stream("POST", path, json=body) as resp:
                assert resp.status_code == 200
                assert runner.wait_until(lambda r: r.in_flight == 2)
                steps = runner.steps
                runner.release(steps=3)                       # the prompt, then two more tokens each
                assert runner.wait_until(lambda r: r.steps == steps + 3)
                assert engine.cache.used_blocks > before and len(engine.running) == 2
            # leaving the block closes the connection with the stream unfinished
        assert runner.wait_until(lambda r: not r.engine.has_work() and r.in_flight == 0)
        assert engine.cache.used_blocks == before
        runner.release()
        done = httpx.post(srv.url + "/v1/completions", json=LONG, timeout=120)   # the server still serves
        assert done.json()["usage"]["completion_tokens"] == 5


def test_client_disconnect_before_a_plain_answer_frees_its_kv_blocks(long_dir):
    """A non-streamed call whose client goes away is aborted too (its handler watches for the disconnect)."""
    import json
    import socket

    state = build_state(long_dir, max_batch=2, block_size=16)
    runner, engine = state.runner, state.runner.engine
    body = json.dumps({**LONG, "prompt": "x" * 40, "max_tokens": 400}).encode()
    with start_server(state) as srv:
        before = engine.cache.used_blocks
        runner.hold()
        host, port = srv.url.removeprefix("http://").split(":")
        conn = socket.create_connection((host, int(port)), timeout=60)
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert runner.wait_until(lambda r: r.in_flight == 1)
        steps = runner.steps
        runner.release(steps=3)
        assert runner.wait_until(lambda r: r.steps == steps + 3)
        assert engine.cache.used_blocks > before and len(engine.running) == 1
        conn.close()
        assert runner.wait_until(lambda r: not r.engine.has_work() and r.in_flight == 0)
        assert engine.cache.used_blocks == before
        runner.release()
        assert httpx.post(srv.url + "/v1/completions", json=LONG, timeout=120).json()["usage"]["completion_tokens"] == 5
