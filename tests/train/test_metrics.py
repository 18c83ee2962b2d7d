import json
import socket
import urllib.request

import pytest

from wanka.train.metrics import MetricsLogger, fallback_flops_per_token, flops_per_token
from wanka.workload.spec import load_model


def test_fallback_flops_match_the_planner_formula():
    plan_flops = pytest.importorskip("wanka.plan.flops")
    for name in ("tiny", "tiny-moe", "llama3-8b"):
        spec = load_model(name)
        assert fallback_flops_per_token(spec, spec.seq_len) == pytest.approx(
            plan_flops.model_flops_per_token(spec, spec.seq_len), rel=1e-3), name
    assert flops_per_token(load_model("tiny"), 128)[1] == "wanka.plan.flops.model_flops_per_token"


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
