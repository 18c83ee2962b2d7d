"""Request bodies are typed strictly, as OpenAI's API: no coercion, one message naming the field."""

from __future__ import annotations

import json

import httpx
import pytest

AUTH = {"Authorization": "Bearer test-key"}  # the key of the `server` fixture (conftest.py)


def _error(resp, status):
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


WRONG_TYPES = [
    ({"model": "tiny", "prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "max_tokens": True}, "max_tokens"),
    ({"model": "tiny", "prompt": "x", "stream": "yes"}, "stream"),
    ({"model": "tiny", "prompt": "x", "seed": "1"}, "seed"),
    ({"model": "tiny", "prompt": "x", "stop": 5}, "stop"),
    ({"model": "tiny", "prompt": "x", "stop": ["a", 5]}, "stop"),
]


@pytest.mark.parametrize("body,field", WRONG_TYPES, ids=[json.dumps(b[0]) for b in WRONG_TYPES])
def test_wrong_types_are_400_not_coerced(server, body, field):
    err = _error(httpx.post(server.url + "/v1/completions", json=body, headers=AUTH, timeout=30), 400)
    assert err["param"] == field and err["message"].startswith(f"{field}: expected")


def test_integer_temperature_is_still_valid(server):
    body = {"model": "tiny", "prompt": "x", "max_tokens": 2, "temperature": 0}
    assert httpx.post(server.url + "/v1/completions", json=body, headers=AUTH, timeout=30).status_code == 200


def test_chat_honours_max_completion_tokens(server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3,
            "ignore_eos": True}
    resp = httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 3
    body["max_tokens"] = 4
    err = _error(httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30), 400)
    assert err["param"] == "max_completion_tokens"
