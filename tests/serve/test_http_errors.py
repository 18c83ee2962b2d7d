"""Error paths: 401 without the key, 400 naming the field, 404 model and route, 405 method, all in
the OpenAI error envelope. (Back-pressure, 429 and 413, is test_backpressure.py.)"""

from __future__ import annotations

import httpx
import pytest

AUTH = {"Authorization": "Bearer test-key"}  # the key of the `server` fixture (conftest.py)


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


def test_bearer_scheme_is_case_insensitive(server):
    resp = httpx.get(server.url + "/v1/models", headers={"Authorization": "bearer test-key"})
    assert resp.status_code == 200


BAD = [
    ({"model": "tiny", "prompt": "x", "temperature": 5}, "temperature"),
    ({"model": "tiny", "prompt": "x", "top_p": 0}, "top_p"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": 1000}, "max_tokens"),
    ({"model": "tiny"}, "prompt"),
    ({"model": "tiny", "prompt": 3}, "prompt"),
    ({"model": "tiny", "prompt": "x" * 200}, "prompt"),
    ({"model": "tiny", "prompt": "x", "n": 0}, "n"),
    ({"model": "tiny", "prompt": "x", "n": 17}, "n"),
    ({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"model": "tiny", "prompt": "x", "logprobs": 21}, "logprobs"),
    ({"model": "tiny", "prompt": "x", "logprobs": True}, "logprobs"),
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


def test_unknown_route_and_wrong_method_use_the_error_envelope(server):
    err = _envelope(httpx.post(server.url + "/v1/embeddings", json={}, headers=AUTH), 404)
    assert "/v1/embeddings" in err["message"]
    err = _envelope(httpx.get(server.url + "/v1/completions", headers=AUTH), 405)
    assert "GET" in err["message"]
