import json
import socket
import urllib.request

import pytest

from wanka.train.metrics import MetricsLogger, flops_per_token
from wanka.workload.spec import load_model


def independent_flops_per_token(spec, seq_len: int) -> float:
    """6 N_active + 12 L d T (PaLM arXiv:2204.02311 appendix B), N_active counted from the tensors here."""
    hd, h = spec.head_dim_, spec.hidden
    attn = h * hd * (2 * spec.heads + 2 * spec.kv_heads_)
    mats = 3 if spec.activation == "swiglu" else 2
    n = spec.vocab * h  # output projection (the input lookup does no matmul)
    for i in range(spec.layers):
        if spec.moe is not None and i >= spec.moe.dense_layers:
            m = spec.moe
            n += attn + mats * h * m.ffn_hidden * (m.top_k + m.shared_experts) + h * m.experts
        else:
            n += attn + mats * h * spec.ffn_hidden
    return 6.0 * n + 12.0 * spec.layers * spec.heads * hd * seq_len


def test_train_flops_per_token_match_an_independent_count():
    for name in ("tiny", "tiny-moe", "llama3-8b"):
        spec = load_model(name)
        assert flops_per_token(spec, spec.seq_len) == pytest.approx(
            independent_flops_per_token(spec, spec.seq_len), rel=1e-3), name


def test_jsonl_tensorboard_and_prometheus(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = MetricsLogger(tmp_path, True, tensorboard=True, prometheus_port=port)
    log.step({"step": 1, "loss": 2.5, "grad_norm": 1.0, "lr": 1e-3, "tokens_per_s": 10.0, "mfu": 0.1})
    log.event({"event": "x"})
    scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    log.close()
    assert "wanka_train_loss 2.5" in scrape
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["loss"] == 2.5
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
