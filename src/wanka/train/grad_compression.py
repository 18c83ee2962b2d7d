"""Gradient compression.

Sharded data parallelism (FSDP2, zero >= 1): `bf16` sets FSDP2's
`MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)` (torch/distributed/fsdp/_fully_shard/_fsdp_api.py):
gradients are cast to bf16 for the reduce-scatter (half the bytes) and the reduced shard is cast
back to the parameter dtype (torch 2.13 `_fsdp_collectives.foreach_reduce`); `none` keeps fp32.
Bytes: a `CountingReduceScatter` installed with `FSDPModule.set_custom_reduce_scatter` adds each
reduce-scatter's input (numel x element size: the whole padded gradient buffer this rank
contributes) and calls `dist.reduce_scatter_single` as FSDP2's default does. PowerSGD has no FSDP2
form (it factors whole matrices; a rank holds a shard), so it needs zero=0.

Replicated data parallelism (layout zero=0): the model is wrapped in DDP and a communication hook
from torch.distributed.algorithms.ddp_comm_hooks compresses each gradient bucket before its all-reduce:

- `none`: `default_hooks.allreduce_hook` (what DDP does without a hook; registered so its bytes
  are counted the same way);
- `bf16`: `default_hooks.bf16_compress_hook` (under another name, see _bf16_hook): buckets cast to
  bf16 for the all-reduce (half the bytes);
- `powersgd`: `powerSGD_hook.powerSGD_hook` (Vogels et al. 2019, arXiv:1905.13727, Algorithm 1):
  each n x m gradient matrix is sent as rank-k factors P (n x k) and Q (m x k) with error
  feedback; vectors and matrices where (n+m)k x min_compression_rate >= nm go uncompressed.
  torch's defaults are kept (min_compression_rate 2, warm start, error feedback) except
  start_powerSGD_iter = 2, the smallest torch allows with error feedback (vanilla all-reduce runs
  before it).

Bytes: every all-reduce the hooks issue on the DDP's own process group is counted (payload this
rank contributes: numel x element size). The hooks look `dist.all_reduce` up in their module at
call time, including in their future callbacks, so the two hook modules get a `dist` proxy whose
all_reduce counts and forwards; nothing else in the process goes through it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

COMPRESSIONS = ("none", "bf16", "powersgd")
FSDP_COMPRESSIONS = ("none", "bf16")
POWERSGD_START_ITER = 2  # powerSGD_hook.py: start_powerSGD_iter must be > 1 with error feedback / warm start


def uses_ddp(cfg, dims) -> bool:
    """Compression on a replicated layout (zero=0): the model goes into DDP with a hook."""
    return cfg.grad_compression is not None and dims.layout.zero == 0


def check_compression(cfg, dims) -> None:
    """DDP hooks need replicated DP only; FSDP2 takes none | bf16 (SpecError otherwise)."""
    from wanka.errors import SpecError

    if cfg.grad_compression is None:
        return
    if cfg.grad_compression not in COMPRESSIONS:
        raise SpecError("grad-compression", " | ".join(COMPRESSIONS), cfg.grad_compression)
    if cfg.powersgd_rank < 1:
        raise SpecError("powersgd-rank", "an integer >= 1", cfg.powersgd_rank)
    layout = dims.layout
    if layout.zero != 0:  # FSDP2
        if cfg.grad_compression not in FSDP_COMPRESSIONS:
            raise SpecError("grad-compression", "none | bf16 with FSDP (zero >= 1); powersgd needs zero=0 (DDP)",
                            cfg.grad_compression)
        if dims.dp * dims.cp < 2 or dims.dp_replicate > 1:
            raise SpecError("grad-compression", "a layout FSDP reduce-scatters over (dp * cp >= 2) without HSDP "
                            "replication (dp_shard = dp)", str(layout))
        return
    if dims.dp < 2 or dims.dp != dims.world_size:
        raise SpecError("grad-compression", "a layout of replicated data parallelism only (dp >= 2, zero=0, "
                        "no tp/pp/cp/ep): DDP communication hooks", str(layout))


class _CountingDist:
    """torch.distributed, except that all_reduce on a watched group adds its payload bytes."""

    def __init__(self):
        self.watched: dict[int, list[int]] = {}  # id(group) -> [bytes]

    def __getattr__(self, name):
        return getattr(dist, name)

    def all_reduce(self, tensor, *args, **kwargs):
        group = kwargs.get("group", args[1] if len(args) > 1 else None)
        counter = self.watched.get(id(group))
        if counter is not None:
            counter[0] += tensor.numel() * tensor.element_size()
        return dist.all_reduce(tensor, *args, **kwargs)


_PROXY = _CountingDist()


def _install_proxy() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    default_hooks.dist = _PROXY
    powerSGD_hook.dist = _PROXY


def _serialized(hook):
    """The hook, waited on before the next bucket's: PowerSGD chains all-reduces in future callbacks,
    which on gloo run on completion threads, so two buckets' chains interleaved in a different order
    on different ranks (seen here: 'Received data size doesn't match expected size' at step 3)."""

    def powersgd_serialized_hook(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut

    return powersgd_serialized_hook


def _bf16_hook(group, bucket):
    """default_hooks.bf16_compress_hook under another name: DDP.register_comm_hook refuses that
    name unless CUDA+NCCL >= 2.10 (torch/nn/parallel/distributed.py), but gloo all-reduces bf16
    on CPU (checked on torch 2.13: a 2-rank bf16 sum is exact)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(group, bucket)


def fsdp_reduce_dtype(cfg) -> torch.dtype | None:
    """FSDP2's reduce dtype for --grad-compression (None: the gradient dtype, fp32)."""
    return torch.bfloat16 if cfg.grad_compression == "bf16" else None


def counting_reduce_scatter():
    """A ReduceScatter comm for `FSDPModule.set_custom_reduce_scatter` that counts the bytes this
    rank puts in (`take_bytes`) and otherwise does what FSDP2's DefaultReduceScatter does."""
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class CountingReduceScatter(ReduceScatter):
        def __init__(self):
            self.bytes = 0

        def allocate(self, size, *, dtype, device):
            return torch.empty(*size, dtype=dtype, device=device)

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            self.bytes += input_tensor.numel() * input_tensor.element_size()
            return dist.reduce_scatter_single(output=output_tensor, input=input_tensor, group=group, op=op,
                                              async_op=async_op)

        def take_bytes(self) -> int:
            n, self.bytes = self.bytes, 0
            return n

    return CountingReduceScatter()


class CompressedDDP:
    """The DDP wrapper, its hook state and the byte counter of its gradient all-reduces."""

    def __init__(self, model: torch.nn.Module, kind: str, rank_k: int, group):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
        from torch.nn.parallel import DistributedDataParallel

        _install_proxy()
        self.kind, self.group = kind, group
        self.counter = _PROXY.watched.setdefault(id(group), [0])
        # PowerSGD keeps its state per bucket index, so the buckets must be the same after a restart.
        # DDP re-buckets once after the first iteration in gradient-ready order (measured on tiny,
        # torch 2.13: one 918,656-element bucket at step 1, then 262,400 + 656,256), so a resumed
        # process would meet other buckets than the state it loads; with find_unused_parameters
        # DDP never re-buckets (the same probe: 656,256 + 262,400 at every step).
        self.ddp = DistributedDataParallel(model, process_group=group, find_unused_parameters=kind == "powersgd")
        if kind == "powersgd":
            self.state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=rank_k,
                                                     start_powerSGD_iter=POWERSGD_START_ITER)
            hook = powerSGD_hook.powerSGD_hook if torch.cuda.is_available() else _serialized(powerSGD_hook.powerSGD_hook)
            self.ddp.register_comm_hook(self.state, hook)
        else:
            self.state = group
            hook = _bf16_hook if kind == "bf16" else default_hooks.allreduce_hook
            self.ddp.register_comm_hook(group, hook)

    def state_dict(self) -> dict | None:
        """PowerSGD's per-rank state for a checkpoint: error feedback, warm-start P/Q, iteration
        count, RNG (every PowerSGDState slot but the process group); None for the other hooks."""
        if self.kind != "powersgd":
            return None
        return {slot: getattr(self.state, slot) for slot in self.state.__slots__ if slot != "process_group"}

    def load_state_dict(self, saved: dict | None) -> None:
        """Restore `state_dict()`'s output (a checkpoint without it leaves a fresh state: PowerSGD then
        restarts with vanilla all-reduce for start_powerSGD_iter steps and zero error feedback)."""
        if self.kind == "powersgd" and saved is not None:
            for slot, value in saved.items():
                setattr(self.state, slot, value)

    def take_bytes(self) -> int:
        """Bytes this rank put into gradient all-reduces since the last call."""
        n, self.counter[0] = self.counter[0], 0
        return n


def expected_powersgd_bytes(model: torch.nn.Module, rank_k: int, min_compression_rate: float = 2.0) -> tuple[int, int]:
    """(uncompressed fp32 bytes, PowerSGD bytes) per step by powerSGD_hook's rule: a matrix (n x m,
    higher dims folded into m) is compressed when (n + m) k x rate < n m, then it sends (n + m) k
    values; everything else is sent whole."""
    full = comp = 0
    for p in model.parameters():
        if not p.requires_grad:
            continue
        n_elems = p.numel()
        full += 4 * n_elems
        if p.dim() > 1:
            n, m = p.shape[0], n_elems // p.shape[0]
            if (n + m) * rank_k * min_compression_rate < n * m:
                comp += 4 * (n + m) * rank_k
                continue
        comp += 4 * n_elems
    return full, comp
