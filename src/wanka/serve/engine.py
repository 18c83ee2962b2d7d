"""The engine: continuous (iteration-level) batching over a paged KV cache.

Every `step()` builds one batch under a token budget, like vLLM v1's scheduler
(vllm/v1/core/sched/scheduler.py: RUNNING requests first, then WAITING ones): each running request
gets its next token (or the next chunk of its prompt), then waiting requests are admitted while a
batch place (max_batch), KV blocks and budget remain, their prompts chunked to fit. A request
takes KV-cache blocks as its context grows (kv_cache.py) and gives them back the step it finishes
(EOS, a stop string, max_tokens, or the context length). When a running request needs a block and
none is free, the most recently admitted running request is preempted: its blocks are freed and it
goes back to the front of the queue, to recompute its prompt and the tokens it has generated when
re-admitted (vLLM's recompute preemption); its output so far is kept, so greedy outputs do not
change. With prefix caching (on by default, as in vLLM v1), an admitted request first takes the
cached blocks that already hold a prefix of its context (kv_cache.py) and computes only the rest.
There is no separate prefill phase: prompt chunks and decode tokens share one forward call.

The engine is single-threaded; `runner.EngineRunner` drives it from a thread for the HTTP server.
"""

from __future__ import annotations

import codecs
import itertools
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from wanka.serve.kv_cache import chain_hash
from wanka.serve.logprobs import TokenLogprob, token_logprob
from wanka.serve.model import BatchLayout, InferenceModel
from wanka.serve.sampling import SamplingParams, new_generator, sample_token


class QueueFull(Exception):
    """More requests are waiting than the engine was configured to queue (HTTP 429)."""


@dataclass
class Request:
    prompt_ids: list[int]
    params: SamplingParams
    id: str = ""
    index: int = 0                  # its choice index in the HTTP response (prompt i, sample j -> i * n + j)
    output_ids: list[int] = field(default_factory=list)
    text: str = ""                  # generated text so far, cut at a stop string when one matched
    emitted_chars: int = 0          # how much of `text` has been handed out as deltas
    num_computed: int = 0           # tokens already in the KV cache
    blocks: list[int] = field(default_factory=list)   # KV-cache block table
    block_names: list[bytes] = field(default_factory=list)  # prefix-cache names of its full blocks
    cached_tokens: int = 0          # prompt positions taken from the prefix cache
    preemptions: int = 0
    finish_reason: str | None = None
    arrival_s: float = 0.0
    first_token_s: float | None = None
    finish_s: float | None = None
    generator: torch.Generator | None = None
    decoder: codecs.IncrementalDecoder | None = None   # bytes -> text, holding a partial UTF-8 character
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per output token when params.logprobs

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids


@dataclass
class Delta:
    """What one step produced for one request: new token ids and the text safe to show."""

    request: Request
    token_ids: list[int]
    text: str
    finished: bool
    logprobs: list[TokenLogprob] = field(default_factory=list)


@dataclass
class EngineConfig:
    max_batch: int = 32              # running requests at most
    max_queue: int = 256             # waiting requests before QueueFull
    max_batched_tokens: int = 512    # tokens per forward call (vLLM's max_num_batched_tokens)
    block_size: int = 64             # token positions per KV-cache block (benchmarks/serve_throughput.py)
    kv_blocks: int | None = None     # KV-cache blocks; None: max_batch full-length contexts
    prefix_caching: bool = True      # reuse cached blocks of a shared prefix (vLLM v1's default)


class Engine:
    def __init__(self, model: InferenceModel, tokenizer, config: EngineConfig | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.config = config or EngineConfig()
        c = self.config
        blocks = c.kv_blocks or c.max_batch * -(-model.max_len // c.block_size)
        if blocks * c.block_size < model.max_len:  # one full-length context must fit, or it could never finish
            raise ValueError(f"kv_blocks x block_size ({blocks} x {c.block_size}) below the context length "
                             f"{model.max_len}")
        self.cache = model.new_cache(blocks, c.block_size)
        self.context_len = model.max_len
        self.preemptions = 0
        self.prefix_hit_tokens = 0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._ids = itertools.count()
        self.last_batch_size = 0
        self.last_batch_tokens = 0

    # ---- requests in and out ----
    def waiting_for_slot(self, arriving: int = 0) -> int:
        """Requests (plus `arriving` ones) that would still wait once every free batch place is
        taken: what max_queue bounds. Counting all of `waiting` refused a request that had a free
        place when several arrived together."""
        free = self.config.max_batch - len(self.running)
        return max(0, len(self.waiting) + arriving - free)

    def add_request(self, req: Request) -> Request:
        if self.waiting_for_slot() >= self.config.max_queue:
            raise QueueFull(f"{self.waiting_for_slot()} requests waiting (max_queue {self.config.max_queue})")
        if not req.prompt_ids or len(req.prompt_ids) >= self.context_len:
            raise ValueError(f"prompt of {len(req.prompt_ids)} tokens does not fit context {self.context_len}")
        req.id = req.id or f"req-{next(self._ids)}"
        req.arrival_s = req.arrival_s or time.perf_counter()
        req.generator = new_generator(req.params.seed)
        req.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.waiting.append(req)
        return req

    def abort(self, req: Request) -> None:
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self._finish(req, "abort")

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one iteration ----
    def _schedule(self) -> list[tuple[Request, int]]:
        budget = self.config.max_batched_tokens
        plan: list[tuple[Request, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:   # running first, in arrival order
            req = self.running[i]
            n = min(len(req.all_ids) - req.num_computed, budget)
            if n <= 0:
                break
            while not self.cache.grow(req.blocks, req.num_computed + n):
                victim = self.running[-1]             # the most recently admitted one
                self._preempt(victim)
                if victim is req:
                    break
            if req not in self.running:               # it was the victim itself
                break
            plan.append((req, n))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.config.max_batch:
            req = self.waiting[0]
            if self.config.prefix_caching and not req.blocks:
                req.blocks, req.block_names = self.cache.match(req.all_ids)
                req.num_computed = req.cached_tokens = len(req.blocks) * self.cache.block_size
            n = min(len(req.all_ids) - req.num_computed, budget)   # a long prompt is chunked over steps
            if not self.cache.grow(req.blocks, req.num_computed + n):
                self._unadmit(req)
                break                                 # wait for blocks to come back
            self.prefix_hit_tokens += req.cached_tokens
            self.waiting.popleft()
            self.running.append(req)
            plan.append((req, n))
            budget -= n
        return plan

    def _unadmit(self, req: Request) -> None:
        self.cache.release(req.blocks)
        req.block_names, req.num_computed, req.cached_tokens = [], 0, 0

    def _preempt(self, req: Request) -> None:
        """Free `req`'s blocks and queue it first, to recompute its context when re-admitted."""
        self.running.remove(req)
        self._unadmit(req)
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)

    def _name_full_blocks(self, req: Request) -> None:
        """Give the prefix cache the blocks `req` has just filled."""
        bs, ids = self.cache.block_size, req.all_ids
        while (len(req.block_names) + 1) * bs <= req.num_computed:
            i = len(req.block_names)
            h = chain_hash(req.block_names[-1] if req.block_names else b"", ids[i * bs:(i + 1) * bs])
            self.cache.name(req.blocks[i], h)
            req.block_names.append(h)

    def step(self) -> list[Delta]:
        plan = self._schedule()
        if not plan:
            return []
        tokens, rows, sampling = [], [], []
        for req, n in plan:
            tokens.extend(req.all_ids[req.num_computed:req.num_computed + n])
            rows.append(len(tokens) - 1)
            sampling.append(req.num_computed + n == len(req.all_ids))  # whole context now cached
        batch = BatchLayout([r.blocks for r, _ in plan], [r.num_computed for r, _ in plan], [n for _, n in plan])
        wanted = [row for row, s in zip(rows, sampling) if s]
        logits = self.model(torch.tensor(tokens), batch, self.cache, torch.tensor(wanted, dtype=torch.long))
        self.last_batch_size, self.last_batch_tokens = len(plan), len(tokens)
        logits = logits[:, :self.tokenizer.vocab_size]  # ids past the tokenizer's cannot be decoded
        deltas, k = [], 0
        now = time.perf_counter()
        for (req, n), s in zip(plan, sampling):
            req.num_computed += n
            if self.config.prefix_caching:
                self._name_full_blocks(req)
            if not s:
                continue
            token = sample_token(logits[k], req.params, req.generator)
            k += 1
            req.first_token_s = req.first_token_s or now
            deltas.append(self._append(req, token, now, logits[k - 1]))
        return deltas

    # ---- finishing ----
    def _append(self, req: Request, token: int, now: float, logits: torch.Tensor | None = None) -> Delta:
        req.output_ids.append(token)
        p, reason, matched_stop = req.params, None, False
        new_logprobs = []
        if p.logprobs is not None and logits is not None:
            # text_offset: where the token's text starts; a byte continuing a character points at its start
            new_logprobs.append(token_logprob(logits, token, p.logprobs, len(req.text)))
            req.logprobs.extend(new_logprobs)
        if token == self.tokenizer.eos_id and not p.ignore_eos:
            reason = "stop"
        else:
            # incremental UTF-8: a character split over two tokens comes out whole (BOS/EOS: no bytes)
            req.text += req.decoder.decode(self.tokenizer.token_bytes(token))
            cut = min((i for i in (req.text.find(s) for s in p.stop) if i >= 0), default=-1)
            if cut >= 0:
                req.text, reason, matched_stop = req.text[:cut], "stop", True
            elif len(req.output_ids) >= p.max_tokens or len(req.all_ids) >= self.context_len:
                reason = "length"
        if reason:
            if not matched_stop:
                req.text += req.decoder.decode(b"", final=True)  # a dangling partial character
            self._finish(req, reason, now)
        return Delta(req, [token], self._take_text(req), reason is not None, new_logprobs)

    def _take_text(self, req: Request) -> str:
        """New text, holding back only a tail that is the start of a stop string (and so may still grow
        into one), as vLLM does; holding back len(stop) - 1 characters always delayed every chat
        stream (stop "\nuser:") by five tokens."""
        end = len(req.text)
        if req.finish_reason is None:
            end -= _partial_stop(req.text, req.params.stop)
        if end <= req.emitted_chars:
            return ""
        out = req.text[req.emitted_chars:end]
        req.emitted_chars = end
        return out

    def _finish(self, req: Request, reason: str, now: float | None = None) -> None:
        req.finish_reason = reason
        req.finish_s = now or time.perf_counter()
        self.running.remove(req)
        self.cache.release(req.blocks)

    # ---- convenience for scripts and tests ----
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Request]:
        """Run `prompts` together to completion (batched as the config allows)."""
        reqs = [self.add_request(Request(list(p), params)) for p in prompts]
        while self.has_work():
            self.step()
        return reqs


def _partial_stop(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best
