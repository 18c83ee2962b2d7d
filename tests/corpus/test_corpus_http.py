"""HTTP bad-input corpus: every case is a 4xx in the OpenAI error envelope whose `param` names the
field and whose message reads "FIELD: expected ...", never a 5xx, never a hang.

Each case: (name, path, body, status, field). A dict body is sent as JSON; bytes are sent raw (for
malformed JSON, NaN/Infinity literals, null bytes, invalid UTF-8, deep nesting, huge bodies).
"""

from __future__ import annotations

import json

import httpx
import pytest

from wanka.serve.fixtures import write_random_export
from wanka.serve.server import build_state, start_server

C, CH, TOK, DETOK = "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"
OK = {"model": "tiny", "prompt": "x", "max_tokens": 2}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
MAX_BATCH = MAX_QUEUE = 8


def _raw(text: str) -> bytes:
    return text.encode()


CASES = [
    # --- the body itself ---
    ("malformed json", C, b"{not json", 400, "body"),
    ("truncated json", C, b'{"model": "tiny", "prompt": "x"', 400, "body"),
    ("empty body", C, b"", 400, "body"),
    ("json array", C, b"[1, 2]", 400, "body"),
    ("json string", CH, b'"hello"', 400, "body"),
    ("json null", TOK, b"null", 400, "body"),
    ("invalid utf-8", C, b'\xff\xfe{"model": "tiny"}', 400, "body"),
    ("raw null byte in a string", C, b'{"model": "tiny", "prompt": "a\x00b"}', 400, "body"),
    ("deep nesting", C, b"[" * 100_000 + b"]" * 100_000, 400, "body"),
    ("huge body", C, _raw(json.dumps({**OK, "prompt": "x" * (2 << 20)})), 413, "body"),
    ("huge tokenize body", TOK, _raw(json.dumps({"prompt": "y" * (2 << 20)})), 413, "body"),
    # --- NaN / Infinity (Python's JSON parser accepts these literals) ---
    ("NaN temperature", C, b'{"model": "tiny", "prompt": "x", "temperature": NaN}', 400, "temperature"),
    ("Infinity top_p", C, b'{"model": "tiny", "prompt": "x", "top_p": Infinity}', 400, "top_p"),
    ("-Infinity max_tokens", C, b'{"model": "tiny", "prompt": "x", "max_tokens": -Infinity}', 400, "max_tokens"),
    ("NaN chat temperature", CH, _raw(json.dumps(CHAT)[:-1] + ', "temperature": NaN}'), 400, "temperature"),
    # --- model ---
    ("unknown model", C, {**OK, "model": "gpt-4"}, 404, "model"),
    ("model with a null byte", C, {**OK, "model": "ti\u0000ny"}, 404, "model"),
    ("empty model", C, {**OK, "model": ""}, 400, "model"),
    ("model not a string", CH, {**CHAT, "model": 7}, 400, "model"),
    ("missing model", C, {"prompt": "x"}, 400, "model"),
    # --- max_tokens ---
    ("negative max_tokens", C, {**OK, "max_tokens": -1}, 400, "max_tokens"),
    ("zero max_tokens", CH, {**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ("float max_tokens", C, {**OK, "max_tokens": 2.5}, 400, "max_tokens"),
    ("max_tokens past the context", C, {**OK, "max_tokens": 10**30}, 400, "max_tokens"),
    ("zero max_completion_tokens", CH, {**CHAT, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    # --- n ---
    ("n zero", C, {**OK, "n": 0}, 400, "n"),
    ("n negative", CH, {**CHAT, "n": -3}, 400, "n"),
    ("n float", C, {**OK, "n": 1.5}, 400, "n"),
    ("n string", C, {**OK, "n": "2"}, 400, "n"),
    ("n above the limit", C, {**OK, "n": 17}, 400, "n"),
    ("prompts x n above the queue", C, {**OK, "prompt": ["a", "b"], "n": 16}, 400, "n"),
    # --- logprobs ---
    ("logprobs negative", C, {**OK, "logprobs": -1}, 400, "logprobs"),
    ("logprobs above 20", C, {**OK, "logprobs": 21}, 400, "logprobs"),
    ("logprobs string", C, {**OK, "logprobs": "5"}, 400, "logprobs"),
    ("chat logprobs an integer", CH, {**CHAT, "logprobs": 3}, 400, "logprobs"),
    ("top_logprobs above 20", CH, {**CHAT, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ("top_logprobs negative", CH, {**CHAT, "logprobs": True, "top_logprobs": -1}, 400, "top_logprobs"),
    ("top_logprobs without logprobs", CH, {**CHAT, "top_logprobs": 2}, 400, "top_logprobs"),
    # --- prompt ---
    ("prompt empty list", C, {**OK, "prompt": []}, 400, "prompt"),
    ("prompt mixed list", C, {**OK, "prompt": ["a", 1]}, 400, "prompt"),
    ("prompt token id past the vocabulary", C, {**OK, "prompt": [[1, 9999]]}, 400, "prompt"),
    ("prompt negative token id", C, {**OK, "prompt": [-1]}, 400, "prompt"),
    ("prompt list with an empty list", C, {**OK, "prompt": [[]]}, 400, "prompt"),
    ("prompt list too long", C, {**OK, "prompt": ["a"] * 65}, 400, "prompt"),
    ("prompt null", C, {**OK, "prompt": None}, 400, "prompt"),
    ("prompt an object", C, {**OK, "prompt": {"text": "x"}}, 400, "prompt"),
    ("prompt past the context", C, {**OK, "prompt": "x" * 200}, 400, "prompt"),
    ("one prompt of a list past the context", C, {**OK, "prompt": ["x", "y" * 200]}, 400, "prompt"),
    ("missing prompt", C, {"model": "tiny"}, 400, "prompt"),
    # --- messages ---
    ("missing messages", CH, {"model": "tiny"}, 400, "messages"),
    ("empty messages", CH, {**CHAT, "messages": []}, 400, "messages"),
    ("messages a string", CH, {**CHAT, "messages": "hi"}, 400, "messages"),
    ("message content an integer", CH, {**CHAT, "messages": [{"role": "user", "content": 1}]}, 400,
     "messages[0].content"),
    ("message without a role", CH, {**CHAT, "messages": [{"content": "hi"}]}, 400, "messages[0].role"),
    ("message with an unknown role", CH, {**CHAT, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role"),
    ("chat past the context", CH, {**CHAT, "messages": [{"role": "user", "content": "z" * 200}]}, 400, "messages"),
    # --- sampling and other fields ---
    ("temperature negative", C, {**OK, "temperature": -0.1}, 400, "temperature"),
    ("temperature a string", CH, {**CHAT, "temperature": "hot"}, 400, "temperature"),
    ("top_p zero", C, {**OK, "top_p": 0}, 400, "top_p"),
    ("seed a float", C, {**OK, "seed": 1.5}, 400, "seed"),
    ("stream a string", C, {**OK, "stream": "true"}, 400, "stream"),
    ("stream_options a string", C, {**OK, "stream": True, "stream_options": "usage"}, 400, "stream_options"),
    ("include_usage a string", CH, {**CHAT, "stream_options": {"include_usage": "yes"}}, 400,
     "stream_options.include_usage"),
    ("stop five strings", C, {**OK, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("stop empty string", C, {**OK, "stop": ""}, 400, "stop"),
    ("presence_penalty", C, {**OK, "presence_penalty": 1.0}, 400, "presence_penalty"),
    ("logit_bias", CH, {**CHAT, "logit_bias": {"1": 5}}, 400, "logit_bias"),
    ("echo", C, {**OK, "echo": True}, 400, "echo"),
    ("best_of 3", C, {**OK, "best_of": 3}, 400, "best_of"),
    ("tools", CH, {**CHAT, "tools": [{"type": "function"}]}, 400, "tools"),
    # --- /tokenize and /detokenize ---
    ("tokenize nothing", TOK, {}, 400, "prompt"),
    ("tokenize prompt and messages", TOK, {"prompt": "a", "messages": CHAT["messages"]}, 400, "prompt"),
    ("tokenize prompt a number", TOK, {"prompt": 5}, 400, "prompt"),
    ("tokenize add_special_tokens a string", TOK, {"prompt": "a", "add_special_tokens": "no"}, 400,
     "add_special_tokens"),
    ("tokenize a bad role", TOK, {"messages": [{"role": "x", "content": "a"}]}, 400, "messages[0].role"),
    ("tokenize unknown model", TOK, {"prompt": "a", "model": "gpt-4"}, 404, "model"),
    ("detokenize strings", DETOK, {"tokens": ["a"]}, 400, "tokens[0]"),
    ("detokenize id past the vocabulary", DETOK, {"tokens": [1, 258]}, 400, "tokens"),
    ("detokenize negative id", DETOK, {"tokens": [-5]}, 400, "tokens"),
    ("detokenize nested", DETOK, {"tokens": [[1]]}, 400, "tokens[0]"),
    ("detokenize missing", DETOK, {}, 400, "tokens"),
    ("detokenize unknown model", DETOK, {"tokens": [1], "model": "gpt-4"}, 404, "model"),
]


@pytest.fixture(scope="module")
def corpus_server(tmp_path_factory):
    export = write_random_export(tmp_path_factory.mktemp("corpus-tiny"), "tiny", seed=0)
    with start_server(build_state(export, max_batch=MAX_BATCH, max_queue=MAX_QUEUE)) as handle:
        yield handle


def test_the_corpus_has_at_least_40_cases():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,path,body,status,field", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_4xx_naming_the_field(corpus_server, name, path, body, status, field):
    kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    resp = httpx.post(corpus_server.url + path, timeout=60, **kw)
    assert resp.status_code == status, resp.text[:300]
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == field and err["message"].startswith(f"{field}: expected"), err


def test_the_server_still_serves_after_the_corpus(corpus_server):
    resp = httpx.post(corpus_server.url + C, json=OK, timeout=60)
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] >= 1
