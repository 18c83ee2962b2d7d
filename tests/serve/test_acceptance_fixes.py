"""Regressions found in acceptance testing: strict request types, max_completion_tokens, route
errors in the OpenAI envelope, TCP_NODELAY on served connections, --port/--host checks, and a
load test whose every request fails."""

from __future__ import annotations

import asyncio
import gc
import json
import socket

import httpx
import pytest

from wanka.cli import main
from wanka.serve.server import bind_socket

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


def test_unknown_route_and_wrong_method_use_the_error_envelope(server):
    err = _error(httpx.post(server.url + "/v1/embeddings", json={}, headers=AUTH), 404)
    assert "/v1/embeddings" in err["message"]
    err = _error(httpx.get(server.url + "/v1/completions", headers=AUTH), 405)
    assert "GET" in err["message"]


def test_bearer_scheme_is_case_insensitive(server):
    resp = httpx.get(server.url + "/v1/models", headers={"Authorization": "bearer test-key"})
    assert resp.status_code == 200


def test_served_connections_have_tcp_nodelay(server):
    """Without TCP_NODELAY, Nagle held every streamed chunk of a keep-alive connection for the
    client's delayed ACK, so all tokens of a stream arrived together ~40 ms late."""
    port = int(server.url.rsplit(":", 1)[1])
    with httpx.Client(base_url=server.url, headers=AUTH) as client:
        assert client.get("/v1/models").status_code == 200  # the connection stays open (keep-alive)
        transports = [o for o in gc.get_objects() if type(o).__name__ == "_SelectorSocketTransport"]
        served = [t.get_extra_info("socket") for t in transports if isinstance(t, asyncio.Transport)
                  and not t.is_closing() and (t.get_extra_info("sockname") or (None, None))[1] == port]
        assert served, "no server-side transport found"
        for sock in served:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


@pytest.mark.parametrize("host,port,field", [
    ("127.0.0.1", 70000, "--port"),
    ("127.0.0.1", -1, "--port"),
    ("nosuchhost.invalid", 0, "--host"),
    ("10.255.255.1", 0, "--host"),
])
def test_bind_socket_names_the_flag(host, port, field):
    with pytest.raises(Exception) as info:
        bind_socket(host, port)
    assert getattr(info.value, "field", None) == field


def test_port_in_use_names_port():
    first = bind_socket("127.0.0.1", 0)
    first.listen()
    try:
        with pytest.raises(Exception) as info:
            bind_socket("127.0.0.1", first.getsockname()[1])
        assert getattr(info.value, "field", None) == "--port"
    finally:
        first.close()


def test_loadtest_where_every_request_fails_exits_2_with_the_reason(server, capsys):
    argv = ["loadtest", "--url", server.url, "--concurrency", "1", "--requests", "2", "--max-tokens", "1000",
            "--api-key", "test-key"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-tokens" in err and "HTTP 400" in err


def test_stream_holds_back_only_a_partial_stop_match(tiny_export):
    """Chat adds the stop string "\\nuser:"; text was held back by len(stop) - 1 = 5 characters on
    every step, so chat streams lagged five tokens behind. Now only a real partial match waits."""
    from wanka.serve.engine import Engine, EngineConfig, Request, _partial_stop
    from wanka.serve.model import InferenceModel
    from wanka.serve.sampling import SamplingParams

    assert _partial_stop("abc\nus", ["\nuser:"]) == 3 and _partial_stop("abc", ["\nuser:"]) == 0
    assert _partial_stop("xa", ["ab", "aab"]) == 1
    tok = tiny_export.tokenizer
    engine = Engine(InferenceModel.from_tensors(tiny_export.spec, tiny_export.tensors), tok, EngineConfig())
    req = engine.add_request(Request(tok.encode("Once upon a time", bos=True),
                                     SamplingParams(12, temperature=0.0, stop=["\nuser:"], ignore_eos=True)))
    while engine.has_work():
        for d in engine.step():
            if not d.finished:  # every step's new text is out as soon as it cannot start a stop string
                assert req.emitted_chars == len(req.text) - _partial_stop(req.text, ["\nuser:"])
    assert req.emitted_chars == len(req.text)


def test_announced_socket_accepts_connections_before_the_server_loop_starts():
    """`wanka serve --json` prints its URL right after binding; a client connecting at once must
    wait in the backlog, not be refused (a CI run once hit ECONNREFUSED here)."""
    import socket as _socket

    from wanka.serve.server import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    try:
        conn = _socket.create_connection(sock.getsockname()[:2], timeout=2)
        conn.close()
    finally:
        sock.close()
