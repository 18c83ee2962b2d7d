"""The model spec (DESIGN.md "Model spec"): a dense or MoE decoder-only transformer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from wanka.errors import SpecError, from_pydantic
from wanka.specfile import StrictSpec, load_spec, preset_names


class MoESpec(StrictSpec):
    experts: int = Field(gt=1)
    top_k: int = Field(gt=0)
    ffn_hidden: int = Field(gt=0, description="per expert")
    shared_experts: int = Field(default=0, ge=0)
    dense_layers: int = Field(default=0, ge=0, description="leading layers that stay dense")
    # gpt-oss experts: a bias on both expert GEMMs (Megatron add_bias_linear) and the GLU inputs
    # clamped before the activation (activation_func_clamp_value 7.0); both add memory-bound kernels
    # outside the grouped GEMMs (plan/expert_epilogue.py)
    expert_bias: bool = False
    activation_clamp: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "MoESpec":
        if self.top_k > self.experts:
            raise ValueError(f"top_k: expected at most experts ({self.experts}), got {self.top_k}")
        return self


class MLASpec(StrictSpec):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv:2412.19437 section 2.1.1)."""

    q_lora_rank: int = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelSpec(StrictSpec):
    name: str = Field(min_length=1)
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int | None = Field(default=None, gt=0, description="default: heads; fewer means GQA")
    head_dim: int | None = Field(default=None, gt=0, description="default: hidden / heads")
    ffn_hidden: int = Field(gt=0)
    vocab: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    activation: Literal["gelu", "swiglu"] = "swiglu"
    norm: Literal["layernorm", "rmsnorm"] = "rmsnorm"
    tied_embeddings: bool = False
    rope_theta: float = Field(default=10000.0, gt=0)
    norm_eps: float = Field(default=1e-5, gt=0)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    # sliding-window attention: each query sees at most this many keys, itself included (Mistral 7B:
    # window 4096, arXiv:2310.06825 s.2 and Table 1; Megatron/MindSpeed --sliding-window). None: full causal
    sliding_window: int | None = Field(default=None, gt=0)
    # the window on some layers only: every n-th layer (1-based number divisible by n) keeps full
    # causal attention (Megatron-Core window_attn_skip_freq, transformer/utils.is_layer_window_attention;
    # gpt-oss: 2, alternating). None: the window on every layer
    full_attention_every: int | None = Field(default=None, gt=1)
    # RMSNorm on every query and key head before RoPE (Qwen3; Megatron-Core qk_layernorm)
    qk_norm: bool = False
    notes: list[str] = []

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"heads: expected a divisor of hidden ({self.hidden}) or an explicit head_dim, got {self.heads}")
        if self.heads % self.kv_heads_:
            raise ValueError(f"kv_heads: expected a divisor of heads ({self.heads}), got {self.kv_heads}")
        if self.moe and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers: expected at most layers ({self.layers}), got {self.moe.dense_layers}")
        return self

    @property
    def kv_heads_(self) -> int:
        return self.kv_heads or self.heads

    @property
    def head_dim_(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def moe_layers(self) -> int:
        return 0 if self.moe is None else self.layers - self.moe.dense_layers


def parse_model_spec(data: dict[str, Any], source: str | None = None) -> ModelSpec:
    try:
        return ModelSpec(**data)
    except ValidationError as exc:
        raise from_pydantic(exc, source=source) from None
    except TypeError as exc:
        raise SpecError("spec", "a mapping of model fields", str(exc), source=source) from None


def model_names() -> list[str]:
    return preset_names("wanka.workload")


def load_model(name_or_path: str, **overrides: Any) -> ModelSpec:
    """A preset name or a YAML/JSON spec file -> ModelSpec. `overrides` replace top-level fields."""
    data, source = load_spec(name_or_path, "wanka.workload", "model")
    return parse_model_spec({**data, **overrides}, source)
