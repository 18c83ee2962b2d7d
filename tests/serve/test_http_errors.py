"""Error paths: 401 without the key, 400 naming the field, 404 model, 429 on a full queue."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

AUTH = {"Authorization": "Bearer test-key"}  # the key of the `server` fixture (conftest.py)
from wanka.serve.server import build_state, start_server


def _post(url, body, headers=AUTH):
    return httpx.post(url + "/v1/completions", json=body, headers=headers, timeout=30)


def _envelope(resp, status):
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "test-key"}])
def test_api_key_required(server, headers):
    err = _envelope(_post(server.url, {"model": "tiny", "prompt": "x"}, headers), 401)
    assert err["code"] == "invalid_api_key"
    assert httpx.get(server.url + "/v1/models", headers=headers).status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200  # not under /v1


BAD = [
    ({"model": "tiny", "prompt": "x", "temperature": 5}, "temperature"),
    ({"model": "tiny", "prompt": "x", "top_p": 0}, "top_p"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 1000}, "max_tokens"),
    ({"model": "tiny"}, "prompt"),
    ({"model": "tiny", "prompt": 3}, "prompt"),
    ({"model": "tiny", "prompt": "x" * 200}, "prompt"),
    ({"model": "tiny", "prompt": "x", "n": 2}, "n"),
    ({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"model": "tiny", "prompt": "x", "logprobs": 2}, "logprobs"),
    ({"prompt": "x"}, "model"),
]


@pytest.mark.parametrize("body,field", BAD, ids=[f for _, f in BAD])
def test_bad_request_names_the_field(server, body, field):
    err = _envelope(_post(server.url, body), 400)
    assert err["param"] == field and err["message"].startswith(f"{field}: expected")
    assert err["type"] == "invalid_request_error"


def test_bad_json_and_bad_chat_role(server):
    resp = httpx.post(server.url + "/v1/completions", content=b"{not json", headers=AUTH)
    assert _envelope(resp, 400)["param"] == "body"
    chat = {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}
    resp = httpx.post(server.url + "/v1/chat/completions", json=chat, headers=AUTH)
    err = _envelope(resp, 400)
    assert err["param"] in ("messages[0].role", "messages.0.role")  # as wanka.errors spells list items
    assert "'user'" in err["message"] and "robot" in err["message"]


def test_unknown_model_is_404(server):
    err = _envelope(_post(server.url, {"model": "gpt-4", "prompt": "x"}), 404)
    assert err["code"] == "model_not_found" and "tiny" in err["message"]


def _wait_in_flight(url, n, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while httpx.get(url + "/health").json()["in_flight"] < n:
        assert time.monotonic() < deadline, "requests never arrived"
        time.sleep(0.005)


def test_full_queue_is_429_and_queued_requests_still_finish(long_dir):
    """One slot, one queue place: a third request while two are in flight gets 429."""
    with start_server(build_state(long_dir, max_batch=1, max_queue=1)) as srv:
        long = {"model": "tiny", "prompt": "x", "max_tokens": 500, "temperature": 0, "ignore_eos": True}
        results = []
        threads = [threading.Thread(target=lambda: results.append(_post(srv.url, long, {}))) for _ in range(2)]
        threads[0].start()
        _wait_in_flight(srv.url, 1)
        threads[1].start()
        _wait_in_flight(srv.url, 2)
        err = _envelope(_post(srv.url, {"model": "tiny", "prompt": "x", "max_tokens": 2}, {}), 429)
        assert err["code"] == "rate_limit_exceeded"
        for t in threads:
            t.join(60)
        assert [r.status_code for r in results] == [200, 200]
        assert all(r.json()["usage"]["completion_tokens"] == 500 for r in results)
        metrics = httpx.get(srv.url + "/metrics").text
        assert "wanka_serve_rejected_requests_total 1.0" in metrics
