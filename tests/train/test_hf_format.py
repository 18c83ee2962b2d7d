"""wanka <-> Hugging Face Transformers: the exported directory loads in `transformers` (CPU) and gives
wanka's logits; conversions are exact in both directions; what HF cannot compute is refused."""

from __future__ import annotations

import json

import pytest
import torch

from wanka.errors import SpecError
from wanka.workload import load_model

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
from wanka.train.hf_format import architecture, from_hf, hf_config, spec_from_hf_config, to_hf  # noqa: E402
from wanka.model.decoder import Transformer  # noqa: E402


def _variant(name: str):
    spec = load_model("tiny-moe" if name in ("mixtral", "shared") else name)
    if name == "mixtral":  # no dense layers, no shared experts, tied embeddings -> MixtralForCausalLM
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"dense_layers": 0}), "tied_embeddings": True})
    if name == "shared":  # a shared expert -> Qwen2-MoE with a zero (sigmoid 0.5) gate and doubled down_proj
        spec = spec.model_copy(update={"moe": spec.moe.model_copy(update={"shared_experts": 1})})
    return spec


def _trained_params(spec):
    torch.manual_seed(0)
    model = Transformer(spec).eval()
    with torch.no_grad():
        for p in model.parameters():  # off the init values (norm weights 1, ...) so every tensor matters
            p.add_(0.05 * torch.randn_like(p))
    return model, {k: v.detach().float() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("name, arch", [("tiny", "LlamaForCausalLM"), ("tiny-moe", "Qwen2MoeForCausalLM"),
                                        ("mixtral", "MixtralForCausalLM"), ("shared", "Qwen2MoeForCausalLM")])
def test_transformers_gives_wankas_logits(name, arch, tmp_path):
    spec = _variant(name)
    model, params = _trained_params(spec)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(spec, 256, 257)))
    safetensors_torch.save_file(to_hf(spec, params), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    assert type(hf).__name__ == arch
    tokens = torch.randint(0, spec.vocab, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (model(tokens) - hf(tokens).logits).abs().max().item()
    assert diff <= 1e-4


@pytest.mark.parametrize("name", ["tiny", "tiny-moe", "mixtral", "shared"])
def test_conversion_is_exact_both_ways(name):
    spec = _variant(name)
    _, params = _trained_params(spec)
    cfg = hf_config(spec, 256, 257)
    back_spec = spec_from_hf_config(cfg, spec.name, "config.json")
    assert hf_config(back_spec, 256, 257) == cfg
    back = from_hf(back_spec, to_hf(spec, params), "model.safetensors")
    assert set(back) == set(params)
    assert all(torch.equal(back[k], params[k]) for k in params)


def test_gelu_model_is_refused_with_one_line():
    spec = load_model("tiny").model_copy(update={"activation": "gelu"})
    with pytest.raises(SpecError, match="model.activation: expected swiglu"):
        architecture(spec)


def test_wrong_shape_and_unknown_tensor_are_named():
    spec = load_model("tiny")
    _, params = _trained_params(spec)
    hf = to_hf(spec, params)
    bad = {**hf, "model.norm.weight": torch.ones(7)}
    with pytest.raises(SpecError, match=r"model.norm.weight: expected shape \[128\], got \[7\]"):
        from_hf(spec, bad, "x")
    with pytest.raises(SpecError, match="model.layers.0.extra.weight: expected no such tensor"):
        from_hf(spec, {**hf, "model.layers.0.extra.weight": torch.ones(1)}, "x")
    missing = {k: v for k, v in hf.items() if k != "lm_head.weight"}
    with pytest.raises(SpecError, match=r"lm_head.weight: expected a tensor of shape \[512, 128\] \(missing\)"):
        from_hf(spec, missing, "x")


def test_gated_shared_expert_is_refused():
    """A Qwen2-MoE whose shared-expert gate is not zero computes something wanka cannot."""
    spec = _variant("shared")
    _, params = _trained_params(spec)
    hf = to_hf(spec, params)
    hf["model.layers.1.mlp.shared_expert_gate.weight"] = torch.full((1, 128), 0.1)
    with pytest.raises(SpecError, match="shared_expert_gate.weight: expected all zeros"):
        from_hf(spec, hf, "x")
