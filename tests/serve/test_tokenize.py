"""vLLM's /tokenize and /detokenize: the ids the server would generate from, and back."""

from __future__ import annotations

import httpx
import pytest

AUTH = {"Authorization": "Bearer test-key"}  # the key of the `server` fixture (conftest.py)


def _post(server, path, body):
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=30)


def test_tokenize_a_prompt_and_back(server, tiny_export):
    out = _post(server, "/tokenize", {"model": "tiny", "prompt": "万卡 cards"}).json()
    tok = tiny_export.tokenizer
    assert out == {"tokens": tok.encode("万卡 cards", bos=True), "count": 13, "max_model_len": 128}
    assert out["tokens"][0] == tok.bos_id
    bare = _post(server, "/tokenize", {"prompt": "万卡 cards", "add_special_tokens": False}).json()
    assert bare["tokens"] == out["tokens"][1:]
    assert _post(server, "/detokenize", {"tokens": out["tokens"]}).json() == {"prompt": "万卡 cards"}


def test_tokenize_messages_counts_what_chat_bills(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    counted = _post(server, "/tokenize", {"messages": messages}).json()["count"]
    chat = _post(server, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 1}).json()
    assert counted == chat["usage"]["prompt_tokens"]


@pytest.mark.parametrize("path,body,status,field", [
    ("/tokenize", {}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, 400, "prompt"),
    ("/tokenize", {"prompt": 5}, 400, "prompt"),
    ("/tokenize", {"prompt": "a", "model": "gpt-4"}, 404, "model"),
    ("/tokenize", {"messages": []}, 400, "messages"),
    ("/detokenize", {"tokens": [1, 258]}, 400, "tokens"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
    ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
    ("/detokenize", {}, 400, "tokens"),
])
def test_bad_tokenize_bodies_name_the_field(server, path, body, status, field):
    resp = _post(server, path, body)
    assert resp.status_code == status
    assert resp.json()["error"]["param"] == field
