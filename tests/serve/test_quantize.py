"""INT8 weights: a quarter of the linear-layer bytes, logits close to fp32, same tokens mostly."""

from __future__ import annotations

import pytest
import torch

from wanka.serve.engine import Engine, EngineConfig
from wanka.serve.model import InferenceModel
from wanka.serve.quality import argmax_agreement, perplexity
from wanka.serve.quantize import Int8Linear, quantize_int8, weight_bytes
from wanka.serve.sampling import SamplingParams

TEXT = "The cluster has ten thousand cards. Each card holds a shard of the model, and the fabric joins them. " * 2


def test_int8_linear_is_per_row_absmax():
    lin = torch.nn.Linear(8, 3, bias=False)
    q = Int8Linear(lin)
    w = lin.weight.detach()
    assert q.qweight.dtype == torch.int8 and q.qweight.abs().max() == 127
    torch.testing.assert_close(q.scale, w.abs().amax(1) / 127)
    assert (q.qweight.float() * q.scale[:, None] - w).abs().max() <= q.scale.max() / 2 + 1e-7
    x = torch.randn(5, 8)
    torch.testing.assert_close(q(x), x @ (q.qweight.float() * q.scale[:, None]).T)


@pytest.mark.parametrize("backend", ["torch", "torchao"])
def test_int8_model_memory_and_quality(backend, moe_export):
    spec, t, tok = moe_export.spec, moe_export.tensors, moe_export.tokenizer
    fp32 = InferenceModel.from_tensors(spec, t)
    int8 = InferenceModel.from_tensors(spec, t)
    if backend == "torchao":
        pytest.importorskip("torchao")
    assert quantize_int8(int8, backend) == backend
    linear_fp32 = sum(m.weight.numel() * 4 for n, m in fp32.named_modules()
                      if isinstance(m, torch.nn.Linear) and not n.endswith("router"))
    saved = weight_bytes(fp32) - weight_bytes(int8)
    assert 0.70 * linear_fp32 < saved < 0.75 * linear_fp32   # 4 -> 1 byte, plus per-row scales
    ids = tok.encode(TEXT)
    assert argmax_agreement(fp32, int8, ids) > 0.85
    ppl32, ppl8 = perplexity(fp32, ids), perplexity(int8, ids)
    assert abs(ppl8 / ppl32 - 1) < 0.05
    out = Engine(int8, tok, EngineConfig(max_batch=2)).generate([tok.encode("hi", bos=True)] * 2,
                                                                 SamplingParams(8, temperature=0.0))
    assert out[0].output_ids == out[1].output_ids and len(out[0].output_ids) >= 1
