"""INT8 weight-only quantization of the model's Linear layers, and weight memory accounting.

Weights become int8 with one fp32 scale per output row (symmetric absmax: scale = max|w| / 127);
activations stay fp32. The primary backend is torchao's `Int8WeightOnlyConfig` (docs.pytorch.org/ao,
torchao 0.18); where torchao is missing, `Int8Linear` below does the same arithmetic in plain
torch. The MoE router stays fp32 (it is tiny, and a flipped expert choice costs more than it saves).
Embeddings stay fp32: a lookup reads one row per token, so they are not on the per-token
weight-streaming path that int8 is meant to shrink.
"""

from __future__ import annotations

import contextlib
import io
import logging

import torch
import torch.nn.functional as F
from torch import nn


class Int8Linear(nn.Module):
    """y = (x @ q^T) * scale, q int8 [out, in], scale fp32 [out] (torch fallback)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.qweight.to(x.dtype)) * self.scale


def _quantizable(module: nn.Module, fqn: str) -> bool:
    return isinstance(module, nn.Linear) and not fqn.endswith("router")


def _torchao_available() -> bool:
    try:
        # torchao prints "Failed to load ... .so" lines for optional CUDA kernels on a CPU build
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            logging.getLogger("torchao").setLevel(logging.ERROR)
            # torchao 0.18 registers an Enum with torch's pytree, which logs a deprecation warning
            logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
            import torchao.quantization  # noqa: F401
        return True
    except Exception:  # any import failure means: use the fallback
        return False


def quantize_int8(model: nn.Module, backend: str = "auto") -> str:
    """Quantize `model`'s Linear weights in place; returns the backend used ("torchao" or "torch")."""
    if backend not in ("auto", "torchao", "torch"):
        raise ValueError(f"backend must be auto, torchao or torch, got {backend!r}")
    if backend in ("auto", "torchao") and _torchao_available():
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig(), filter_fn=_quantizable)
        return "torchao"
    if backend == "torchao":
        raise RuntimeError("torchao is not installed")
    targets = [(name, m) for name, m in model.named_modules() if _quantizable(m, name)]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, Int8Linear(linear))
    return "torch"


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage of a tensor, looking inside tensor subclasses (torchao's int8 weight = qdata + scale)."""
    if type(t) not in (torch.Tensor, nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def weight_bytes(model: nn.Module) -> int:
    """Bytes of parameters and persistent buffers (model weights; not the RoPE tables or KV cache)."""
    total = sum(tensor_bytes(p) for p in model.parameters())
    persistent = {n for n, _ in model.named_buffers() if not n.rsplit(".", 1)[-1].startswith("rope_")}
    return total + sum(tensor_bytes(b) for n, b in model.named_buffers() if n in persistent)
