"""TrainConfig: every knob of one training run, validated in __post_init__ (unknown keys rejected)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from wanka.errors import SpecError
from wanka.train.fault import Injection


@dataclass
class TrainConfig:
    model: str = "tiny"
    data: str | None = None          # prepared shards dir; None = shipped corpus
    layout: str = ""
    steps: int = 20
    seed: int = 0
    ckpt: str = "runs/train"
    ckpt_every: int = 5
    keep: int = 3
    async_ckpt: bool = False
    seq_len: int | None = None       # None = the model's seq_len
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup: int = 5
    grad_clip: float = 1.0
    aux_loss_coef: float = 0.01      # MoE load-balancing loss weight (Switch used 1e-2)
    moe_capacity_factor: float | None = None  # None = dropless; else GShard/Switch capacity factor
    moe_bias_rate: float = 0.0       # aux-loss-free bias update speed gamma (DeepSeek-V3 used 0.001); 0 = off
    moe_redundant_experts: int | None = None  # EPLB at checkpoints with this many extra replicas; None = off
    grad_compression: str | None = None  # none | bf16 | powersgd: DDP comm hook (zero=0) or FSDP2 reduce dtype (zero>=1)
    powersgd_rank: int = 1           # PowerSGD matrix approximation rank k
    spike_factor: float = 3.0
    replica_check_every: int = 10
    straggler_factor: float = 1.5
    collective_timeout_s: float = 120.0
    pp_schedule: str | None = None
    compile: bool = False
    tensorboard: bool = False
    prometheus_port: int | None = None
    peak_tflops: float | None = None  # None = measured matmul rate (CPU) for MFU
    inject: list[str] = field(default_factory=list)
    init: str | None = None          # hf:DIR - initial weights from a Hugging Face directory (train/hf_init.py)

    def __post_init__(self) -> None:
        for key in ("steps", "ckpt_every", "keep", "replica_check_every"):
            if getattr(self, key) < 1:
                raise SpecError(key.replace("_", "-"), "an integer >= 1", getattr(self, key))
        if self.seq_len is not None and self.seq_len < 2:
            raise SpecError("seq-len", "an integer >= 2", self.seq_len)
        # written as `not (... )` so that NaN, which fails every comparison, is refused too
        # lr = 0 is allowed: AdamW then leaves every weight bit-identical (p*(1-0*wd) - 0*update), which
        # is how a conversion round trip (--init hf:DIR, train, export --format hf) is checked.
        if not (0 <= self.lr < math.inf and 0 <= self.min_lr <= self.lr):
            raise SpecError("lr", "a finite lr >= 0 and 0 <= min-lr <= lr", (self.lr, self.min_lr))
        if self.init is not None:
            from wanka.train.hf_init import parse_init

            parse_init(self.init)
        if not (0 < self.collective_timeout_s < math.inf):
            raise SpecError("collective-timeout", "a finite number of seconds > 0", self.collective_timeout_s)
        if self.peak_tflops is not None and not (0 < self.peak_tflops < math.inf):
            raise SpecError("peak-tflops", "a finite TFLOP/s > 0 (omit it to measure)", self.peak_tflops)
        if self.prometheus_port is not None and not (0 <= self.prometheus_port <= 65535):
            raise SpecError("prometheus-port", "a TCP port in 0..65535", self.prometheus_port)
        if self.moe_capacity_factor is not None and not (0 < self.moe_capacity_factor < math.inf):
            raise SpecError("moe-capacity-factor", "a finite number > 0 (omit for dropless)", self.moe_capacity_factor)
        if not (0 <= self.moe_bias_rate < math.inf):
            raise SpecError("moe-bias-rate", "a finite number >= 0 (0 = no bias balancing)", self.moe_bias_rate)
        if self.moe_redundant_experts is not None and self.moe_redundant_experts < 0:
            raise SpecError("moe-redundant-experts", "an integer >= 0 (omit for no rebalancing)", self.moe_redundant_experts)
        self.injections = [Injection.parse(t) for t in self.inject]

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise SpecError(f"config.{sorted(unknown)[0]}", "a TrainConfig field")
        return cls(**d)


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up then cosine decay to min_lr over cfg.steps (step counts from 0)."""
    import math

    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, frac)))


__all__ = ["TrainConfig", "lr_at", "asdict"]
