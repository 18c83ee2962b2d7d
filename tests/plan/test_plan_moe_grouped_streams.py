"""Transformer Engine's per-expert grouped GEMM (plan/moe_cost.py grouped_gemm_extra_kernels_fwd):
one cuBLAS GEMM per local expert over 4 CUDA streams, so each of the layer's two grouped GEMMs is
ceil(E / 4) kernels deep instead of one; checked against the closed form and in layer_time."""

import math

import pytest

from wanka.hardware.catalog import gpu as load_gpu
from wanka.plan import efficiency as E
from wanka.plan import moe_cost
from wanka.plan.compute import layer_time
from wanka.workload import load_model


@pytest.mark.parametrize("local,extra", [(1, 0), (2, 0), (4, 0), (5, 2), (8, 2), (16, 6), (32, 14)])
def test_extra_kernels_follow_the_stream_pool(local, extra):
    assert moe_cost.grouped_gemm_extra_kernels_fwd(local) == extra
    assert extra == 2 * (math.ceil(local / moe_cost.TE_GROUPED_GEMM_STREAMS) - 1)


def _time(m, gpu, ep):
    layer_time.cache_clear()  # layer_time memoises; the stream pool is read at call time
    return layer_time(m, gpu, True, 1, 4096, 4096, 1, ep, False, "none", "bf16", "flash")


def test_layer_time_pays_the_stream_depth_forward_and_twice_backward(monkeypatch):
    m, gpu = load_model("deepseek-v3"), load_gpu("h800")
    ep = 16  # 256 experts: 16 per rank -> 4 deep on each of 4 streams, 6 kernels in series beyond two
    deep = _time(m, gpu, ep)
    monkeypatch.setattr(moe_cost, "TE_GROUPED_GEMM_STREAMS", 10 ** 6)  # every expert its own stream
    flat = _time(m, gpu, ep)
    k = E.KERNEL_OVERHEAD_S * 6
    assert deep.fwd_s - flat.fwd_s == pytest.approx(k, rel=1e-6)
    assert deep.bwd_s - flat.bwd_s == pytest.approx(2 * k, rel=1e-6)
    one = _time(m, gpu, 256)  # one expert per rank: a single GEMM, nothing in series
    monkeypatch.undo()
    assert _time(m, gpu, 256).fwd_s == one.fwd_s
