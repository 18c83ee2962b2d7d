"""The official `openai` Python client against the real server: prompt lists, n, logprobs, chat
logprobs, and streams of multi-byte text, each checked against the engine run alone or the model."""

from __future__ import annotations

import openai
import pytest
import torch

from wanka.serve.export import load_export
from wanka.model.decoder import reference_logits
from wanka.serve.sampling import SamplingParams

API_KEY = "test-key"  # the key of the `server` and `cycle_server` fixtures (conftest.py)


def _client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_prompt_list_gives_one_choice_per_prompt(server, tiny_export, run_alone):
    prompts = ["Hello", "The cluster", "a"]
    out = _client(server).completions.create(model="tiny", prompt=prompts, max_tokens=8, temperature=0)
    alone = [run_alone(tiny_export, tiny_export.tokenizer.encode(p, bos=True),
                       SamplingParams(max_tokens=8, temperature=0.0)) for p in prompts]
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert [c.text for c in out.choices] == [r.text for r in alone]
    assert [c.finish_reason for c in out.choices] == [r.finish_reason for r in alone]
    assert out.usage.prompt_tokens == sum(len(r.prompt_ids) for r in alone)
    assert out.usage.completion_tokens == sum(len(r.output_ids) for r in alone)


def test_token_id_prompts(server, tiny_export, run_alone):
    ids = [[256, 72, 105], [256, 97]]
    out = _client(server).completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=0)
    alone = [run_alone(tiny_export, p, SamplingParams(max_tokens=5, temperature=0.0)) for p in ids]
    assert [c.text for c in out.choices] == [r.text for r in alone]
    assert out.usage.prompt_tokens == 5


def test_n_samples_are_each_their_own_seeded_sequence(server, tiny_export, run_alone):
    """With seed s, choice j is the request with seed s + j run alone; prompts x n are indexed i * n + j."""
    prompts = ["Once upon a time", "GPU"]
    out = _client(server).completions.create(model="tiny", prompt=prompts, n=2, max_tokens=10, temperature=1.0,
                                             seed=11, extra_body={"ignore_eos": True})
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    for c in out.choices:
        i, j = divmod(c.index, 2)
        alone = run_alone(tiny_export, tiny_export.tokenizer.encode(prompts[i], bos=True),
                          SamplingParams(max_tokens=10, temperature=1.0, seed=11 + j, ignore_eos=True))
        assert c.text == alone.text
    assert out.choices[0].text != out.choices[1].text   # two draws, not one copied
    assert out.usage.completion_tokens == 40
    assert out.usage.prompt_tokens == len(prompts[0]) + 1 + len(prompts[1]) + 1   # each prompt once


def test_completion_logprobs_are_the_models(server, tiny_export):
    out = _client(server).completions.create(model="tiny", prompt="The cluster", max_tokens=6, temperature=0,
                                             logprobs=3, extra_body={"ignore_eos": True})
    lp = out.choices[0].logprobs
    prompt = tiny_export.tokenizer.encode("The cluster", bos=True)
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    # recover the token ids from the top alternatives (greedy: the token is the most likely one)
    ids = []
    for t in range(6):
        ref = torch.log_softmax(reference_logits(tiny_export.spec, tiny_export.tensors, prompt + ids)[-1, :258].double(), -1)
        values, top = ref.topk(3)
        ids.append(int(top[0]))
        assert lp.token_logprobs[t] == pytest.approx(float(values[0]), abs=1e-4)
        assert sorted(lp.top_logprobs[t].values(), reverse=True) == pytest.approx(values.tolist(), abs=1e-4)


def test_chat_logprobs_match_the_model_and_the_bytes(cycle_server, cycle_dir):
    export = load_export(cycle_dir)
    out = _client(cycle_server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=12, temperature=0,
        logprobs=True, top_logprobs=2)
    choice = out.choices[0]
    assert choice.message.content == "万卡万卡"
    content = choice.logprobs.content
    assert bytes(b for e in content for b in e.bytes) == "万卡万卡".encode()
    prompt = export.tokenizer.encode("user: hi\nassistant:", bos=True)
    ids = list("万卡万卡".encode())
    ref = torch.log_softmax(reference_logits(export.spec, export.tensors, prompt + ids)[:, :258].double(), -1)
    for t, entry in enumerate(content):
        row = ref[len(prompt) - 1 + t]
        assert entry.logprob == pytest.approx(float(row[ids[t]]), abs=1e-4)
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].bytes == [ids[t]]
        assert entry.top_logprobs[1].logprob == pytest.approx(float(row.topk(2).values[1]), abs=1e-4)


def test_chat_stream_never_splits_a_character(cycle_server):
    stream = _client(cycle_server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=30, temperature=0, stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "万卡" * 5
    assert all("\ufffd" not in p for p in pieces) and len(pieces) == 10   # one chunk per whole character


def test_completion_stream_with_n_and_logprobs_carries_held_back_tokens(cycle_server):
    stream = _client(cycle_server).completions.create(model="tiny", prompt="x", max_tokens=9, n=2, temperature=0,
                                                      logprobs=1, stream=True)
    texts, tokens = {0: "", 1: ""}, {0: [], 1: []}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.text
            tokens[c.index] += c.logprobs.tokens if c.logprobs else []
            assert "\ufffd" not in c.text
    assert texts == {0: "万卡万", 1: "万卡万"}
    assert tokens[0] == tokens[1] and len(tokens[0]) == 9   # the tokens of held-back bytes come with their character


def test_cut_character_at_max_tokens_is_one_replacement(cycle_server):
    """Four bytes are one character and one byte of the next: the dangling byte is truly invalid text."""
    out = _client(cycle_server).completions.create(model="tiny", prompt="x", max_tokens=4, temperature=0)
    assert out.choices[0].text == "万\ufffd" and out.choices[0].finish_reason == "length"


def test_rate_limit_is_a_typed_error_with_retry_after(tiny_dir):
    """One running place and one waiting place: while the engine is held, two requests fill them
    and a third is refused at once with 429 and Retry-After, which the client raises as RateLimitError."""
    from concurrent.futures import ThreadPoolExecutor

    from wanka.serve.server import build_state, start_server

    state = build_state(tiny_dir, max_batch=1, max_queue=1)
    with start_server(state) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        state.runner.hold()
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.completions.create, model="tiny", prompt=["a", "b"], max_tokens=2)
            assert state.runner.wait_until(lambda r: r.in_flight == 2)
            with pytest.raises(openai.RateLimitError) as info:
                client.completions.create(model="tiny", prompt="c", max_tokens=2)
            state.runner.release()
            assert len(first.result().choices) == 2
        assert info.value.response.headers["retry-after"] == "1"


def test_chat_n_counts_the_prompt_once(cycle_server):
    out = _client(cycle_server).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, temperature=0, n=2)
    assert [(c.index, c.message.content) for c in out.choices] == [(0, "万卡"), (1, "万卡")]
    assert out.usage.prompt_tokens == len("user: hi\nassistant:") + 1 and out.usage.completion_tokens == 12
