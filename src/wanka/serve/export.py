"""Read and validate a `wanka export` directory (docs/serve.md "Export directory").

    DIR/config.json        {"format": "wanka-export-v1", "model": {...ModelSpec...}, "dtype": "float32",
                            "step": int, "params_sha256": hex, "tokenizer": "tokenizer.json"}
    DIR/model.safetensors  fp32 tensors with Llama-style names (expected_shapes below)
    DIR/tokenizer.json     wanka.data.tokenizer file

Every problem is one `SpecError` that names the file and the field or tensor, so `wanka serve`
exits 2 with one line instead of failing deep inside `load_state_dict`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from wanka.data.tokenizer import ByteTokenizer, load_tokenizer
from wanka.errors import SpecError
from wanka.workload import ModelSpec, parse_model_spec

EXPORT_FORMAT = "wanka-export-v1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Export:
    path: Path
    spec: ModelSpec
    tensors: dict[str, torch.Tensor]
    tokenizer: ByteTokenizer
    step: int
    params_sha256: str


def _ffn_shapes(prefix: str, hidden: int, ffn: int, swiglu: bool) -> dict[str, tuple[int, ...]]:
    shapes = {f"{prefix}.w1.weight": (ffn, hidden), f"{prefix}.w2.weight": (hidden, ffn)}
    if swiglu:  # GELU models have no up projection: w2(gelu(w1 x))
        shapes[f"{prefix}.w3.weight"] = (ffn, hidden)
    return shapes


def expected_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape for `spec`, exactly the names of the export contract."""
    h, hd, swiglu = spec.hidden, spec.head_dim_, spec.activation == "swiglu"
    q_out, kv_out = spec.heads * hd, spec.kv_heads_ * hd
    shapes: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (spec.vocab, h)}
    for i in range(spec.layers):
        p = f"layers.{i}"
        shapes.update({
            f"{p}.attention_norm.weight": (h,),
            f"{p}.attention.wq.weight": (q_out, h),
            f"{p}.attention.wk.weight": (kv_out, h),
            f"{p}.attention.wv.weight": (kv_out, h),
            f"{p}.attention.wo.weight": (h, q_out),
            f"{p}.ffn_norm.weight": (h,),
        })
        moe = spec.moe
        if moe is None or i < moe.dense_layers:
            shapes.update(_ffn_shapes(f"{p}.feed_forward", h, spec.ffn_hidden, swiglu))
            continue
        shapes[f"{p}.feed_forward.router.weight"] = (moe.experts, h)
        for e in range(moe.experts):
            shapes.update(_ffn_shapes(f"{p}.feed_forward.experts.{e}", h, moe.ffn_hidden, swiglu))
        if moe.shared_experts:
            shapes.update(_ffn_shapes(f"{p}.feed_forward.shared", h, moe.shared_experts * moe.ffn_hidden, swiglu))
    shapes["norm.weight"] = (h,)
    if not spec.tied_embeddings:
        shapes["output.weight"] = (spec.vocab, h)
    return shapes


def _read_config(path: Path) -> dict:
    file = path / CONFIG_FILE
    if not file.is_file():
        raise SpecError(CONFIG_FILE, "a file in the export directory (missing)", source=str(path))
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # RecursionError: absurd nesting
        raise SpecError(CONFIG_FILE, "valid JSON", source=str(path)) from None
    if not isinstance(data, dict):
        raise SpecError(CONFIG_FILE, "a JSON object", type(data).__name__, source=str(path))
    return data


def _check_config(data: dict, path: Path) -> ModelSpec:
    src = str(path / CONFIG_FILE)
    if data.get("format") != EXPORT_FORMAT:
        raise SpecError("format", f'"{EXPORT_FORMAT}"', data.get("format"), source=src)
    if data.get("dtype") != "float32":
        raise SpecError("dtype", '"float32"', data.get("dtype"), source=src)
    if not isinstance(data.get("model"), dict):
        raise SpecError("model", "an object of ModelSpec fields", data.get("model"), source=src)
    try:
        spec = parse_model_spec(data["model"], source=src)
    except SpecError as exc:  # name the field as it sits in config.json
        raise SpecError(f"model.{exc.field}", exc.expected, exc.got, source=src) from None
    if spec.mla is not None:
        raise SpecError("model.mla", "null (multi-head latent attention is not served)", source=src)
    if spec.norm != "rmsnorm":
        raise SpecError("model.norm", '"rmsnorm" (the export math is RMSNorm)', spec.norm, source=src)
    if spec.head_dim_ % 2:
        raise SpecError("model.head_dim", "an even number (RoPE rotates pairs)", spec.head_dim_, source=src)
    step = data.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise SpecError("step", "a non-negative integer", step, source=src)
    tok = data.get("tokenizer")
    if not isinstance(tok, str) or not tok or "/" in tok or "\\" in tok or tok in (".", ".."):
        raise SpecError("tokenizer", "a file name inside the export directory", tok, source=src)
    return spec


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = path / WEIGHTS_FILE
    if not file.is_file():
        raise SpecError(WEIGHTS_FILE, "a file in the export directory (missing)", source=str(path))
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as exc:
        raise SpecError(WEIGHTS_FILE, "a readable safetensors file", str(exc).splitlines()[0], source=str(path)) from None


def check_tensors(tensors: dict[str, torch.Tensor], spec: ModelSpec, source: str) -> None:
    """Every contract tensor present with its shape and float32; no unknown names."""
    expected = expected_shapes(spec)
    for name, shape in expected.items():
        if name not in tensors:
            raise SpecError(name, f"a tensor of shape {list(shape)} (missing)", source=source)
        got = tensors[name]
        if tuple(got.shape) != shape:
            raise SpecError(name, f"shape {list(shape)}", list(got.shape), source=source)
        if got.dtype != torch.float32:
            raise SpecError(name, "dtype float32", str(got.dtype).removeprefix("torch."), source=source)
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise SpecError(extra[0], "no such tensor for this model config (unexpected name)", source=source)


def params_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the tensors in name order: each name's UTF-8 bytes, then its raw fp32 bytes.

    This is how `wanka export` fills config.json's params_sha256 (wanka.train.state.sha256_of); the
    recipe is restated here and tested against a training-side export in
    tests/serve/test_train_parity.py.
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().numpy().tobytes())
    return h.hexdigest()


def load_export(path: str | Path) -> Export:
    """Read DIR, validate it against the contract, return the spec, tensors and tokenizer."""
    path = Path(path)
    if not path.is_dir():
        raise SpecError("--model", "an export directory written by `wanka export`", str(path))
    data = _read_config(path)
    spec = _check_config(data, path)
    tok_file = path / data["tokenizer"]
    if not tok_file.is_file():
        raise SpecError(data["tokenizer"], "a tokenizer file in the export directory (missing)", source=str(path))
    tokenizer = load_tokenizer(tok_file)
    if tokenizer.vocab_size > spec.vocab:
        raise SpecError("model.vocab", f"at least the tokenizer's vocab_size ({tokenizer.vocab_size})",
                        spec.vocab, source=str(path / CONFIG_FILE))
    tensors = _read_tensors(path)
    check_tensors(tensors, spec, str(path / WEIGHTS_FILE))
    digest = data.get("params_sha256")
    if digest and digest != params_sha256(tensors):  # absent or empty: nothing to verify against
        raise SpecError("params_sha256", "the sha256 of model.safetensors' tensors (the weights changed after "
                        "export, or the file is corrupt)", source=str(path / CONFIG_FILE))
    return Export(path, spec, tensors, tokenizer, data["step"], str(digest or ""))
