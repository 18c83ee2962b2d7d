"""Parameter counts against published sizes; activation memory against Korthikanti's formula."""

import pytest

from wanka.workload import load_model
from wanka.workload.activations import layer_activations
from wanka.workload.flops import token_flops
from wanka.workload.params import param_counts


@pytest.mark.parametrize("name,total_B,active_B", [
    ("llama3-8b", 8.03, 8.03), ("llama3-70b", 70.6, 70.6), ("llama3-405b", 405.9, 405.9),
    ("deepseek-v3", 671, 37), ("mixtral-8x7b", 46.7, 12.9), ("gpt3-175b", 175.0, 175.0)])
def test_published_sizes(name, total_B, active_B):
    pc = param_counts(load_model(name))
    assert pc.total / 1e9 == pytest.approx(total_B, rel=0.02)
    assert pc.active / 1e9 == pytest.approx(active_B, rel=0.03)


def test_korthikanti_activation_formula():
    m = load_model("megatron-22b")  # GPT: dropout, GELU, a=64, h=6144
    s, b, h, a, t = 2048, 4, 6144, 64, 8
    act = layer_activations(m, b, s, attention="unfused")
    sbh = s * b * h
    assert act.stored(1, False, "none") == pytest.approx(sbh * (34 + 5 * a * s / h))
    assert act.stored(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    assert act.stored(t, True, "none") == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert act.stored(t, True, "selective") == pytest.approx(34 * sbh / t)
    assert act.stored(t, True, "full") == pytest.approx(2 * sbh / t)


def test_recompute_flops():
    tf = token_flops(load_model("llama3-8b"), 8192)
    assert tf.backward == pytest.approx(2 * tf.forward)
    assert tf.total("full") > tf.total("selective") > tf.total("none")
