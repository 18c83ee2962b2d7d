"""`wanka train --init hf:DIR`: start training from a Hugging Face Llama / Mixtral / Qwen2-MoE directory.

`read_hf_dir` validates the directory against the run's ModelSpec before anything starts (config.json
present and of an architecture wanka computes exactly, same shapes as --model, weights present with
the right names and shapes) and returns the weights in wanka's names; every problem is one
SpecError, so `wanka train` exits 2 with one line instead of failing inside torchrun. Weights may
be one model.safetensors or shards listed in model.safetensors.index.json (HF's sharded layout).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from wanka.errors import SpecError
from wanka.train.hf_format import from_hf, hf_config, spec_from_hf_config
from wanka.workload.spec import ModelSpec

PREFIX = "hf:"
# config.json keys that decide the math or a tensor shape (name, seq_len and token ids do not)
_MUST_MATCH = ("architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
               "tie_word_embeddings", "num_local_experts", "num_experts", "num_experts_per_tok",
               "moe_intermediate_size", "shared_expert_intermediate_size", "mlp_only_layers")


def parse_init(value: str) -> Path:
    if not value.startswith(PREFIX) or len(value) == len(PREFIX):
        raise SpecError("init", "hf:DIR (a Hugging Face model directory)", value)
    return Path(value[len(PREFIX):])


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise SpecError(path.name, f"{what} in the --init directory (missing)", source=str(path.parent))
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise SpecError(path.name, "valid JSON", source=str(path.parent)) from None
    if not isinstance(data, dict):
        raise SpecError(path.name, "a JSON object", type(data).__name__, source=str(path.parent))
    return data


def _read_safetensors(d: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = [d / "model.safetensors"]
    index = d / "model.safetensors.index.json"
    if not files[0].is_file() and index.is_file():
        weight_map = _read_json(index, "the shard index").get("weight_map")
        if not isinstance(weight_map, dict):
            raise SpecError("weight_map", "an object tensor name -> shard file", source=str(index))
        files = [d / f for f in sorted(set(weight_map.values()))]
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.is_file():
            raise SpecError(f.name, "a safetensors file in the --init directory (missing)", source=str(d))
        try:
            tensors.update(load_file(str(f)))
        except (SafetensorError, OSError, ValueError) as exc:
            raise SpecError(f.name, "a readable safetensors file", str(exc).splitlines()[0], source=str(d)) from None
    return tensors


def check_config_matches(cfg: dict, spec: ModelSpec, source: str) -> None:
    """The directory's config describes the same architecture and shapes as --model."""
    theirs = hf_config(spec_from_hf_config(cfg, spec.name, source), 0, 0)
    ours = hf_config(spec, 0, 0)
    for key in _MUST_MATCH:
        if theirs.get(key) != ours.get(key):
            raise SpecError(key, f"{ours.get(key)!r} (as --model {spec.name})", theirs.get(key), source=source)


def read_hf_dir(path: Path, spec: ModelSpec) -> dict[str, torch.Tensor]:
    """Validated weights of a HF directory, in wanka's parameter names (fp32)."""
    if not path.is_dir():
        raise SpecError("init", "hf:DIR with an existing Hugging Face model directory", str(path))
    cfg = _read_json(path / "config.json", "config.json")
    source = str(path / "config.json")
    check_config_matches(cfg, spec, source)
    return from_hf(spec, _read_safetensors(path), str(path))
