"""Per-step metrics: JSONL (always), TensorBoard and Prometheus (optional), MFU.

MFU (PaLM, arXiv:2204.02311 appendix B) = model FLOPs per token x tokens/s / (ranks x peak).
Model FLOPs per token are the planner's (`wanka.workload.flops.model_flops_per_token`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from wanka.workload.flops import model_flops_per_token
from wanka.workload.spec import ModelSpec


def flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per token, the planner's formula (docs/plan.md), so that train and plan report one MFU."""
    return float(model_flops_per_token(spec, seq_len))


def measure_peak_tflops(seconds: float = 0.2) -> float:
    """Achieved fp32 matmul TFLOP/s of this process (the CPU 'peak' for MFU; docs/train.md)."""
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    a @ b
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    return 2 * 512**3 * n / (time.perf_counter() - t0) / 1e12


def memory_MB() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class MetricsLogger:
    """Rank 0 only: metrics.jsonl and events.jsonl under `out`, plus optional sinks."""

    def __init__(self, out: Path, enabled: bool, tensorboard: bool = False, prometheus_port: int | None = None):
        self.enabled = enabled
        self.out = Path(out)
        self._tb = self._prom = None
        if not enabled:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        self._metrics = open(self.out / "metrics.jsonl", "a")
        self._events = open(self.out / "events.jsonl", "a")
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.out / "tb"))
        if prometheus_port is not None:
            from prometheus_client import Gauge, start_http_server

            start_http_server(prometheus_port)
            self._prom = {k: Gauge(f"wanka_train_{k}", k) for k in ("loss", "grad_norm", "lr", "tokens_per_s", "mfu", "step")}

    def step(self, record: dict) -> None:
        if not self.enabled:
            return
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(f"train/{k}", v, record["step"])
        if self._prom is not None:
            for k, g in self._prom.items():
                if k in record:
                    g.set(record[k])

    def event(self, record: dict) -> None:
        if not self.enabled:
            return
        self._events.write(json.dumps({"time": time.time(), **record}) + "\n")
        self._events.flush()

    def close(self) -> None:
        if self.enabled:
            self._metrics.close()
            self._events.close()
            if self._tb is not None:
                self._tb.close()
