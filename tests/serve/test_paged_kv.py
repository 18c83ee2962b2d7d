"""Paged KV cache: requests take blocks as they grow; when blocks run out the newest running
request is preempted and recomputed later, without changing greedy outputs."""

from __future__ import annotations

import pytest

from wanka.serve.engine import Engine, EngineConfig, Request
from wanka.serve.model import InferenceModel
from wanka.serve.sampling import SamplingParams

PROMPTS = ["Hello", "The cluster has ten thousand cards", "a", "Once upon a time", "xyz" * 9, "GPU"]
LENGTHS = [40, 60, 35, 50, 45, 55]


def _engine(export, **cfg) -> Engine:
    return Engine(InferenceModel.from_tensors(export.spec, export.tensors), export.tokenizer, EngineConfig(**cfg))


def _run(engine, export):
    greedy = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in LENGTHS]
    reqs = [engine.add_request(Request(export.tokenizer.encode(p, bos=True), g)) for p, g in zip(PROMPTS, greedy)]
    most = 0
    while engine.has_work():
        engine.step()
        most = max(most, len(engine.running))
        held = {b for r in engine.running for b in r.blocks}
        assert len(held) + engine.cache.free_blocks == engine.cache.blocks  # no block lost
    return reqs, most


@pytest.mark.parametrize("which", ["tiny_export", "moe_export"])
def test_preemption_under_a_small_cache_keeps_greedy_outputs(which, request):
    export = request.getfixturevalue(which)
    roomy = _engine(export, max_batch=6)
    expected, _ = _run(roomy, export)
    assert roomy.preemptions == 0
    # 12 blocks of 16 = 192 positions: one 128-token context fits, six growing ones do not
    tight = _engine(export, max_batch=6, kv_blocks=12, block_size=16)
    reqs, most = _run(tight, export)
    assert tight.preemptions > 0 and any(r.preemptions for r in reqs)
    assert [r.output_ids for r in reqs] == [r.output_ids for r in expected]
    assert all(len(r.output_ids) == n and r.finish_reason == "length" for r, n in zip(reqs, LENGTHS))
    assert tight.cache.free_blocks == 12 and most >= 2


def test_short_requests_share_memory_that_full_length_slots_would_not(tiny_export):
    # 16 blocks of 16 = two full 128-token contexts of memory; eight short requests run together
    engine = _engine(tiny_export, max_batch=8, kv_blocks=16, block_size=16)
    greedy = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    for p in ["hi", "ok", "go", "no", "yes", "up", "on", "at"]:
        engine.add_request(Request(tiny_export.tokenizer.encode(p, bos=True), greedy))
    engine.step()
    assert engine.last_batch_size == 8 and engine.preemptions == 0
    while engine.has_work():
        engine.step()
    assert engine.cache.free_blocks == 16


def test_a_cache_smaller_than_one_context_is_refused(tiny_export):
    with pytest.raises(ValueError, match="context length"):
        _engine(tiny_export, kv_blocks=7, block_size=16)  # 112 < 128 positions


@pytest.mark.timeout(60)  # a regression in the check would start a server that never returns
def test_serve_rejects_too_few_kv_blocks(run_cli, tiny_dir):
    code, out, err = run_cli("serve", "--model", str(tiny_dir), "--kv-blocks", "1", "--port", "0")  # 64 < 128
    assert code == 2 and out == "" and "--kv-blocks" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("serve", "--model", str(tiny_dir), "--block-size", "0", "--port", "0")
    assert code == 2 and "--block-size" in err


def _outputs(engine, export, prompts, n, one_by_one=False):
    greedy = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    if one_by_one:
        return [engine.generate([export.tokenizer.encode(p, bos=True)], greedy)[0] for p in prompts]
    return engine.generate([export.tokenizer.encode(p, bos=True) for p in prompts], greedy)


@pytest.mark.parametrize("which", ["tiny_export", "moe_export"])
def test_prefix_caching_reuses_a_shared_prefix_without_changing_outputs(which, request):
    export = request.getfixturevalue(which)
    system = "You are a helpful assistant for a cluster of ten thousand cards. "  # 66 chars + BOS
    prompts = [system + q for q in ("Who are you?", "What is MFU?", "Say hi.")] + [system + "Who are you?"]
    plain = _outputs(_engine(export, prefix_caching=False, block_size=16), export, prompts, 12, one_by_one=True)
    engine = _engine(export, block_size=16)
    cached = _outputs(engine, export, prompts, 12, one_by_one=True)
    assert [r.output_ids for r in cached] == [r.output_ids for r in plain]
    assert cached[0].cached_tokens == 0
    assert all(r.cached_tokens == 64 for r in cached[1:3])  # the 4 full blocks of the shared prefix
    # the repeated prompt finds its whole context cached but the last (partial) block: 64 + 16 = 80
    assert cached[3].cached_tokens == 16 * ((len(export.tokenizer.encode(prompts[3], bos=True)) - 1) // 16)
    assert engine.prefix_hit_tokens == sum(r.cached_tokens for r in cached)


def test_evicted_blocks_are_never_reused_stale(tiny_export):
    # a pool of two contexts: later prompts evict the cached blocks of earlier ones; every output
    # must still equal the no-cache output (a stale block would change it)
    prompts = [f"{i} " * 30 for i in range(6)] + ["0 " * 30, "5 " * 30]
    plain = _outputs(_engine(tiny_export, prefix_caching=False, block_size=16), tiny_export, prompts, 8, True)
    engine = _engine(tiny_export, block_size=16, kv_blocks=16)
    cached = _outputs(engine, tiny_export, prompts, 8, one_by_one=True)
    assert [r.output_ids for r in cached] == [r.output_ids for r in plain]
    assert cached[-1].cached_tokens > 0  # the most recent prefix was still cached
    assert cached[-2].cached_tokens == 0  # "0 ..." was evicted long ago
