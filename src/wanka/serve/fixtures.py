"""Write a valid export directory from seeded random weights, in the contract format.

The training runtime writes real exports (`wanka export`); this writer exists so that tests, the
demo and the benchmark can serve a model without training one first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from wanka.data.tokenizer import ByteTokenizer
from wanka.serve.export import CONFIG_FILE, EXPORT_FORMAT, WEIGHTS_FILE, expected_shapes, params_sha256
from wanka.workload import ModelSpec, load_model


def random_tensors(spec: ModelSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """Norm weights 1 + small noise; matrices N(0, 1/fan_in) so activations stay O(1)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in expected_shapes(spec).items():
        if len(shape) == 1:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            out[name] = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
    return out


def write_export(path: str | Path, spec: ModelSpec, tensors: dict[str, torch.Tensor], step: int = 0) -> Path:
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().float().contiguous() for k, v in tensors.items()}
    save_file(tensors, str(path / WEIGHTS_FILE))
    digest = params_sha256(tensors)
    ByteTokenizer().save(path / "tokenizer.json")
    config = {"format": EXPORT_FORMAT, "model": spec.model_dump(), "dtype": "float32", "step": step,
              "params_sha256": digest, "tokenizer": "tokenizer.json"}
    (path / CONFIG_FILE).write_text(json.dumps(config, indent=2))
    return path


def write_random_export(path: str | Path, preset: str = "tiny", seed: int = 0, **overrides: Any) -> Path:
    """A `preset` model (with ModelSpec `overrides`) with seeded random weights, written to `path`."""
    spec = load_model(preset, **overrides)
    return write_export(path, spec, random_tensors(spec, seed))


def cycle_tensors(spec: ModelSpec, text: str) -> dict[str, torch.Tensor]:
    """Weights under which greedy decoding emits the UTF-8 bytes of `text` over and over.

    Every block adds nothing (attention `wo` and FFN `w2` are zero, so the residual stream is the
    token's embedding). Byte i of the cycle embeds as basis vector e_i and every other token as
    e_m (m = cycle length); the output row of the byte that follows byte i reads e_i, and the first
    byte's row reads e_m. After RMSNorm a basis vector becomes sqrt(hidden) * e_i, so the next byte
    leads every other logit by sqrt(hidden) (11.3 for hidden 128): greedy decoding is exact.
    A multi-byte `text` ("万卡") makes a model whose every character spans several tokens."""
    cycle = list(text.encode("utf-8"))
    if len(set(cycle)) != len(cycle) or len(cycle) >= spec.hidden:
        raise ValueError(f"text: expected distinct bytes, fewer than hidden={spec.hidden}, got {text!r}")
    if spec.tied_embeddings:
        raise ValueError("spec.tied_embeddings: expected false (the output rows differ from the embeddings)")
    out = {name: (torch.ones(shape) if len(shape) == 1 else torch.zeros(shape))
           for name, shape in expected_shapes(spec).items()}
    m = len(cycle)
    emb, head = out["tok_embeddings.weight"], out["output.weight"]
    emb[:, m] = 1.0
    for i, byte in enumerate(cycle):
        emb[byte].zero_()
        emb[byte, i] = 1.0
        head[cycle[(i + 1) % m], i] = 1.0
    head[cycle[0], m] = 1.0
    return out


def write_cycle_export(path: str | Path, text: str = "万卡", preset: str = "tiny") -> Path:
    """An export of `preset` that greedily repeats `text` (see cycle_tensors)."""
    spec = load_model(preset)
    return write_export(path, spec, cycle_tensors(spec, text))
