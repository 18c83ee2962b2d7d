"""The OpenAI-shaped HTTP API on a real server: shapes, streaming, batching parity, metrics."""

from __future__ import annotations

import json
import threading

import httpx

AUTH = {"Authorization": "Bearer test-key"}  # the key of the `server` fixture (conftest.py)
from wanka.serve.engine import Engine, EngineConfig
from wanka.serve.model import InferenceModel
from wanka.serve.protocol import CHAT_STOP, chat_prompt, ChatMessage
from wanka.serve.sampling import SamplingParams

PROMPTS = ["Hello", "The cluster", "a", "Once upon a time", "GPU", "xyzxyzxyz", "ten thousand", "cards"]


def _post(server, path, body, headers=AUTH, **kw):
    return httpx.post(server.url + path, json=body, headers=headers, timeout=30, **kw)


def _sse_events(text: str) -> list:
    lines = [ln for ln in text.split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(ln[6:]) for ln in lines[:-1]]


def _sequential_texts(export, prompts, max_tokens, stop=()):
    engine = Engine(InferenceModel.from_tensors(export.spec, export.tensors), export.tokenizer,
                    EngineConfig(max_batch=1))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=list(stop))
    return [engine.generate([export.tokenizer.encode(p, bos=True)], params)[0] for p in prompts]


def test_models_and_health(server):
    models = httpx.get(server.url + "/v1/models", headers=AUTH).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"
    assert models["data"][0]["object"] == "model"
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["quantization"] == "none"


def test_concurrent_greedy_requests_equal_one_at_a_time(server, tiny_export):
    expected = _sequential_texts(tiny_export, PROMPTS, 24)
    results: dict[int, dict] = {}
    barrier = threading.Barrier(len(PROMPTS))

    def send(i):
        barrier.wait()
        body = {"model": "tiny", "prompt": PROMPTS[i], "max_tokens": 24, "temperature": 0}
        results[i] = _post(server, "/v1/completions", body).json()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i, req in enumerate(expected):
        choice = results[i]["choices"][0]
        assert choice["text"] == req.text and choice["finish_reason"] == req.finish_reason
        assert results[i]["usage"] == {"prompt_tokens": len(req.prompt_ids), "completion_tokens": len(req.output_ids),
                                       "total_tokens": len(req.all_ids)}
    # the server really batched them: some engine step ran more than one sequence
    metrics = httpx.get(server.url + "/metrics").text
    count = float(next(ln.split()[-1] for ln in metrics.splitlines() if ln.startswith("wanka_serve_batch_size_count")))
    total = float(next(ln.split()[-1] for ln in metrics.splitlines() if ln.startswith("wanka_serve_batch_size_sum")))
    assert total / count > 1.0


def test_streaming_completion_matches_non_streaming(server):
    body = {"model": "tiny", "prompt": "The cluster", "max_tokens": 20, "temperature": 0}
    whole = _post(server, "/v1/completions", body).json()
    resp = _post(server, "/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(resp.text)
    chunks = [e for e in events if e["choices"]]
    assert all(e["object"] == "text_completion" for e in events)
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert events[-1]["usage"] == whole["usage"] and not events[-1]["choices"]


def test_chat_completion_and_stream(server, tiny_export):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = chat_prompt([ChatMessage(**m) for m in messages])
    assert prompt == "system: Be brief.\nuser: Hi\nassistant:"
    expected = _sequential_texts(tiny_export, [prompt], 16, stop=[CHAT_STOP])[0]
    body = {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0}
    out = _post(server, "/v1/chat/completions", body).json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"] == {"role": "assistant", "content": expected.text}
    assert out["usage"]["prompt_tokens"] == len(expected.prompt_ids)
    events = _sse_events(_post(server, "/v1/chat/completions", {**body, "stream": True}).text)
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == expected.text
    assert events[-1]["choices"][0]["finish_reason"] == expected.finish_reason


def test_stop_sequence_over_http(server, tiny_export):
    full = _sequential_texts(tiny_export, ["Once upon a time"], 30)[0].text
    stop = full[5:7]
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": stop}
    out = _post(server, "/v1/completions", body).json()["choices"][0]
    assert out["finish_reason"] == "stop" and out["text"] == full[:full.find(stop)]


def test_metrics_exposes_serving_figures(server):
    _post(server, "/v1/completions", {"model": "tiny", "prompt": "m", "max_tokens": 4})
    text = httpx.get(server.url + "/metrics").text
    for name in ("wanka_serve_time_to_first_token_seconds_count", "wanka_serve_time_per_output_token_seconds_count",
                 "wanka_serve_queue_depth", "wanka_serve_batch_size_bucket", "wanka_serve_generation_tokens_per_second",
                 "wanka_serve_generation_tokens_total", "wanka_serve_kv_cache_usage_ratio",
                 "wanka_serve_preemptions_total", "wanka_serve_prefix_cache_hit_tokens_total"):
        assert name in text
    ttft = float(next(ln.split()[-1] for ln in text.splitlines()
                      if ln.startswith("wanka_serve_time_to_first_token_seconds_count")))
    assert ttft >= 1
