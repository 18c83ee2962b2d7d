"""The training loop: data -> forward/backward (plain, FSDP/TP, or pipelined) -> clip -> AdamW ->
metrics -> checkpoint, with loss-spike rollback, straggler and replica checks, fault injection.

Works with and without torch.distributed: world size 1 without a process group runs the plain
model (the parity reference).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from wanka.data.sampler import Sampler, SamplerState, microbatches
from wanka.data.shards import TokenShards
from wanka.train.checkpoint import Checkpointer
from wanka.train.balance import ExpertBalance
from wanka.train.config import TrainConfig, lr_at
from wanka.train.experts import ExpertDispatcher, ExpertGradSync, build_ep_groups
from wanka.train.grad_compression import (CompressedDDP, check_compression, counting_reduce_scatter,
                                          fsdp_reduce_dtype, uses_ddp)
from wanka.train.fault import Injector, SpikeDetector, stragglers
from wanka.train.metrics import MetricsLogger, flops_per_token, measure_peak_tflops, memory_MB
from wanka.train.parallel_dims import ParallelDims, check_moe_options
from wanka.train.parallelize import cross_entropy, parallelize
from wanka.workload.spec import load_model


def _is_dtensor(t) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


class Trainer:
    def __init__(self, cfg: TrainConfig, rank: int = 0, world_size: int = 1, data_dir: Path | None = None):
        self.cfg, self.rank, self.world = cfg, rank, world_size
        overrides = {"seq_len": cfg.seq_len} if cfg.seq_len else {}
        self.spec = load_model(cfg.model, **overrides)
        self.dims = ParallelDims.from_layout(cfg.layout, world_size, self.spec)
        check_moe_options(cfg, self.spec, self.dims)
        check_compression(cfg, self.dims)
        self.layout = self.dims.layout
        self.distributed = dist.is_initialized()
        mesh = self.dims.build_mesh() if self.distributed else None
        self.mesh = mesh
        self.ep_groups = build_ep_groups(self.dims, rank) if self.dims.ep > 1 else (None, None)
        self.balance = ExpertBalance(self.spec, self.dims.ep, cfg.moe_bias_rate, self.distributed)
        self._build(self.balance.placements if self.dims.ep > 1 else None)
        self.fsdp = self.dims.dp * self.dims.cp > 1 and not uses_ddp(cfg, self.dims)
        self.autocast = self.layout.precision == "bf16" and not self.fsdp
        data = TokenShards(data_dir) if data_dir else None
        self.sampler = Sampler(data, self.spec.seq_len, self.layout.gbs, self.dims.dp_rank(rank), self.dims.dp, cfg.seed) if data else None
        self.ckpt_pg = dist.new_group(backend="gloo") if self.distributed else None
        self.log = MetricsLogger(Path(cfg.ckpt), rank == 0, cfg.tensorboard, cfg.prometheus_port)
        self.ckpt = Checkpointer(Path(cfg.ckpt), rank, world_size, cfg.keep, cfg.async_ckpt, self.ckpt_pg, self.log.event)
        self.injector = Injector(cfg.injections, rank, world_size, Path(cfg.ckpt) / ".inject", self.log.event)
        self.ckpt.on_commit = self.injector.after_commit
        self.spikes = SpikeDetector(cfg.spike_factor)
        self.lr_scale, self.spike_count, self.step = 1.0, 0, 0
        self.restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.flops_per_token = flops_per_token(self.spec, self.spec.seq_len)
        self.peak_tflops = cfg.peak_tflops or measure_peak_tflops()
        self.losses: list[float] = []
        self.last_loss: float | None = None  # the loss of the restored checkpoint's last step
        self.last_step_s: float | None = None  # the slowest rank's time for the previous step

    def _build(self, placements: dict | None) -> None:
        """Model chunks (with this rank's experts of `placements`), optimizer, MoE wiring. Called
        again when EPLB re-places the experts (then the caller loads the checkpoint)."""
        cfg = self.cfg
        ddp = uses_ddp(cfg, self.dims)
        # FSDP with --grad-compression: count the reduce-scatter bytes (and reduce in bf16 for bf16)
        self.grad_comm = counting_reduce_scatter() if cfg.grad_compression is not None and not ddp else None
        self.par = parallelize(self.spec, self.dims, cfg.seed, cfg.pp_schedule, cfg.compile, self.rank, self.mesh,
                               placements, fsdp=not ddp, reduce_dtype=fsdp_reduce_dtype(cfg),
                               reduce_scatter=self.grad_comm)
        self.ddp = None
        if ddp:
            self.ddp = CompressedDDP(self.par.chunks[0], cfg.grad_compression, cfg.powersgd_rank,
                                     dist.new_group(list(range(self.world))))
        self.params = [p for c in self.par.chunks for p in c.parameters()]
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
        layers = {int(k): m for c in self.par.chunks for k, m in c.moe_layers().items()}
        self.balance.bind(layers)
        for moe in layers.values():
            moe.capacity_factor = cfg.moe_capacity_factor
        self.expert_sync, self.built_placements = None, placements
        if placements is not None:
            ep_rank = self.dims.ep_rank(self.rank)
            for k, moe in layers.items():
                moe.dispatcher = ExpertDispatcher(self.ep_groups[0], ep_rank, placements[k], self.spec.moe.experts)
            self.expert_sync = ExpertGradSync(layers, placements, ep_rank, *self.ep_groups, self.dims.expert_dp,
                                              self.dims.dp)

    # ---- state -----------------------------------------------------------------------------
    def _state(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self._state_module(), self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def _state_module(self) -> torch.nn.Module:
        """One module whose parameters are this rank's chunks' parameters under their global names
        (interleaved pipelining gives a rank several chunks; DCP wants one module)."""
        if len(self.par.chunks) == 1:
            return self.par.chunks[0]
        view = torch.nn.Module()
        view.layers = torch.nn.ModuleDict()
        for chunk in self.par.chunks:
            for name in ("tok_embeddings", "norm", "output"):
                if getattr(chunk, name, None) is not None:
                    setattr(view, name, getattr(chunk, name))
            for key, layer in chunk.layers.items():
                view.layers[key] = layer
        return view

    def _train_state(self) -> dict:
        return {"step": self.step, "sampler": self.sampler.state.to_dict(), "lr_scale": self.lr_scale,
                "spike_count": self.spike_count, "spikes": self.spikes.state(), "model_spec": self.spec.model_dump(),
                "layout": str(self.layout), "seed": self.cfg.seed,
                "last_loss": self.losses[-1] if self.losses else self.last_loss,
                "experts": self.balance.state() if self.balance.active else None}

    def save(self) -> float:
        """Checkpoint now; returns the seconds the training loop was held (async: staging only)."""
        t0 = time.perf_counter()
        self.ckpt.save(self.step, self._state(), self._train_state(), before_commit=self.injector.in_save,
                       rank_state={"powersgd": self.ddp.state_dict()} if self.ddp is not None else None)
        return time.perf_counter() - t0

    def restore(self, keep_skips: bool = False) -> bool:
        """Load the newest valid checkpoint; False when there is none."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state()
        found = self.ckpt.load(state, self.log.event)
        if found is None:
            return False
        step, ts = found
        if self.expert_sync is not None and self.balance.placements_in(ts.get("experts")) != self.built_placements:
            # the checkpoint was written after an EPLB re-placement: rebuild with its placement, load again
            self._build(self.balance.placements_in(ts["experts"]))
            state = self._state()
            step, ts = self.ckpt.load(state, self.log.event)
        set_state_dict(self._state_module(), self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        skips = self.sampler.state.skip
        self.sampler.state = SamplerState.from_dict(ts["sampler"])
        if keep_skips:
            self.sampler.state.skip = sorted(set(self.sampler.state.skip) | set(skips))
        self.step, self.last_loss = step, ts.get("last_loss")
        if not keep_skips:  # a rollback keeps its own spike count and LR scale
            self.spike_count, self.lr_scale = ts["spike_count"], ts["lr_scale"]
        self.spikes.load(ts["spikes"])
        self.balance.load_state(ts.get("experts"))
        if self.ddp is not None:
            self.ddp.load_state_dict((self.ckpt.loaded_rank_state or {}).get("powersgd"))
        self.log.event({"event": "restored", "step": step, "attempt": self.restarts})
        return True

    def load_init(self) -> None:
        """Overwrite the seeded init with the --init directory's weights (each chunk takes its own
        parameters; full tensors are sharded into FSDP/TP DTensors by set_model_state_dict)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        from wanka.train.hf_init import parse_init, read_hf_dir

        full = read_hf_dir(parse_init(self.cfg.init), self.spec)
        for chunk in self.par.chunks:
            mine = {k: v for k, v in full.items() if k in chunk.state_dict()}
            set_model_state_dict(chunk, mine, options=StateDictOptions(full_state_dict=True, strict=False))
        self.log.event({"event": "init", "from": self.cfg.init, "tensors": len(full)})

    # ---- one step --------------------------------------------------------------------------
    def _amp(self):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.autocast(device, dtype=torch.bfloat16) if self.autocast else contextlib.nullcontext()

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, poison: bool) -> tuple[float, bool]:
        """Local mean loss over this rank's batch, and whether this rank computed a loss."""
        if self.par.schedule is not None:
            # the schedule averages over micro-batches by scaling the gradients after the backward
            for chunk in self.par.chunks:
                chunk.set_aux_loss_scale(self.cfg.aux_loss_coef if self.spec.moe else 0.0)
            losses: list[torch.Tensor] = []
            has_first = self.dims.coords(self.rank)["pp"] == 0
            args = (x,) if has_first else ()
            kwargs = {"target": y, "losses": losses} if self.par.has_last_stage else {}
            with self._amp():
                self.par.schedule.step(*args, **kwargs)
            if not self.par.has_last_stage:
                return 0.0, False
            loss = torch.stack([l.detach().float() for l in losses]).mean().item()
            return (float("nan") if poison else loss), True
        model = self.par.chunks[0]
        if self.dims.cp > 1:  # this rank's zigzag slice of every sequence (ring_attention.py)
            from wanka.train.ring_attention import zigzag_positions

            idx = zigzag_positions(x.shape[1], self.dims.cp, self.dims.coords(self.rank)["cp"]).to(x.device)
            x, y = x[:, idx], y[:, idx]
        parts = microbatches(x, y, self.layout.mbs)
        model.set_aux_loss_scale(self.cfg.aux_loss_coef / len(parts) if self.spec.moe else 0.0)
        total = 0.0
        runner = self.ddp.ddp if self.ddp is not None else model
        for i, (mx, my) in enumerate(parts):
            if self.fsdp:
                model.set_requires_gradient_sync(i == len(parts) - 1)
            last = i == len(parts) - 1
            sync = runner.no_sync() if self.ddp is not None and not last else contextlib.nullcontext()
            with self._amp(), sync:
                loss = ce = cross_entropy(runner(mx), my)  # the balancing loss joins in the backward
                if poison:
                    loss = loss * float("nan")
                (loss / len(parts)).backward()
            total += ce.detach().float().item() / len(parts)
        return (float("nan") if poison else total), True

    def _all_reduce(self, values: list[float], op=None) -> list[float]:
        if not self.distributed:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
        return t.tolist()

    def clip_grads(self) -> float:
        """Global L2 norm over all ranks' (sharded) grads, then scale to cfg.grad_clip.

        Local squared sums of sharded grads are grouped by (mesh, sharded mesh dims) and summed over
        those dims only: a few collectives per step instead of one per parameter (gloo latency
        ~1 ms each). Replicated dims are not summed; Partial grads are reduced before squaring."""
        plain = torch.zeros((), dtype=torch.float64)
        groups: dict = {}
        experts = {id(p) for p in self.expert_sync.params()} if self.expert_sync else set()
        if self.expert_sync is not None:
            plain += self.expert_sync.norm_sq()  # sharded over EP: summed over the EP group inside
        for p in self.params:
            g = p.grad
            if g is None or id(p) in experts:
                continue
            if _is_dtensor(g) and any(pl.is_partial() for pl in g.placements):
                # Partial (pending-sum) grads, e.g. SP norm weights: sum first, then square.
                plain += float(torch.linalg.vector_norm(g.float()).full_tensor()) ** 2
            elif _is_dtensor(g):
                dims = tuple(i for i, pl in enumerate(g.placements) if not pl.is_replicate())
                key = (id(g.device_mesh), dims)
                entry = groups.setdefault(key, [g.device_mesh, dims, torch.zeros((), dtype=torch.float64, device=g.to_local().device)])
                entry[2] += g.to_local().double().pow(2).sum()
            else:
                plain += g.double().pow(2).sum().cpu()
        total = plain
        for mesh, dims, sq in groups.values():
            for d in dims:
                dist.all_reduce(sq, group=mesh.get_group(d))
            total = total + sq.cpu()
        if self.dims.pp > 1:
            dist.all_reduce(total, group=self.par.mesh["pp"].get_group())
        norm = float(total.sqrt())
        coef = min(1.0, self.cfg.grad_clip / (norm + 1e-6))
        if coef < 1.0:
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(coef)
        return norm

    def _handle_bad(self, index: int, loss: float, reason: str) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.spike_count += 1
        self.sampler.state.skip = sorted(set(self.sampler.state.skip) | {index})
        if self.spike_count >= 2:
            self.lr_scale *= 0.5
        rolled = self.restore(keep_skips=True)
        self.log.event({"event": "loss_spike", "reason": reason, "batch": index, "loss": loss,
                        "rolled_back_to": self.step if rolled else None, "skipped_batches": self.sampler.state.skip,
                        "lr_scale": self.lr_scale})

    def train_step(self) -> dict | None:
        t0 = time.perf_counter()
        index, x, y = self.sampler.next()
        if torch.cuda.is_available():
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        self.balance.begin_step()
        local, has = self.forward_backward(x, y, poison=self.injector.nan(index))
        self.injector.slow(self.step + 1, self.last_step_s or time.perf_counter() - t0)
        t_sync = time.perf_counter()
        s, c = self._all_reduce([local if has else 0.0, 1.0 if has else 0.0])
        wait_s = time.perf_counter() - t_sync  # how long this rank waited for the slowest one
        loss = s / c
        reason = self.spikes.is_bad(loss)
        if reason:
            self._handle_bad(index, loss, reason)
            return None
        self.spikes.update(loss)
        moe_stats = self.balance.end_step() if self.balance.active else {}
        if self.expert_sync is not None:
            self.expert_sync.reduce()
        grad_norm = self.clip_grads()
        lr = lr_at(self.cfg, self.step) * self.lr_scale
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.ckpt.poll()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        dt = time.perf_counter() - t0
        times, busy = self._gather_times(dt, dt - wait_s)
        self.last_step_s = max(times)
        tokens_per_s = self.layout.gbs * self.spec.seq_len / max(times)
        rec = {"step": self.step, "batch": index, "loss": loss, "grad_norm": grad_norm, "lr": lr, "step_time_s": max(times),
               "tokens_per_s": tokens_per_s,
               "mfu": self.flops_per_token * tokens_per_s / (self.world * self.peak_tflops * 1e12),
               "memory_MB": memory_MB(), "attempt": self.restarts, **moe_stats}
        if self.ddp is not None:
            rec["grad_bytes"] = self.ddp.take_bytes()  # this rank's payload into gradient all-reduces
        elif self.grad_comm is not None:
            rec["grad_bytes"] = self.grad_comm.take_bytes()  # this rank's input to FSDP's reduce-scatters
        # A slow rank makes the others wait at the loss all-reduce, so compare busy time (step time
        # minus that wait); with 2 ranks the median is their mean, so require a 0.3 s step too.
        slow = stragglers(busy, self.cfg.straggler_factor) if len(busy) > 2 or max(times) > 0.3 else []
        if slow:
            self.log.event({"event": "straggler", "step": self.step, "ranks": slow, "busy_s": busy})
        return rec

    def _gather_times(self, dt: float, busy: float) -> tuple[list[float], list[float]]:
        """Every rank's step time and busy time (one all-reduce)."""
        if not self.distributed:
            return [dt], [busy]
        out = torch.zeros(2, self.world, dtype=torch.float64)
        out[0, self.rank], out[1, self.rank] = dt, busy
        dist.all_reduce(out)
        return out[0].tolist(), out[1].tolist()

    def check_replicas(self) -> bool | None:
        """All dp_replicate replicas hold bit-identical local shards (None: nothing to compare)."""
        if self.dims.dp_replicate == 1:
            return None
        h = hashlib.sha256()
        for p in self.params:
            t = p.to_local() if _is_dtensor(p) else p
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        digests = [None] * self.dims.dp_replicate
        dist.all_gather_object(digests, h.hexdigest(), group=self.par.mesh["dp_replicate"].get_group())
        ok = len(set(digests)) == 1
        self.log.event({"event": "replica_check", "step": self.step, "ok": ok})
        return ok

    def _plan_rebalance(self) -> bool:
        """EPLB at a checkpoint boundary (not after the last step): the placement the checkpoint records."""
        if self.cfg.moe_redundant_experts is None or self.step == self.cfg.steps:
            return False
        before_after = [self.balance.current_imbalance()]
        changed = self.balance.rebalance(self.cfg.moe_redundant_experts, keep_window=True)
        before_after.append(self.balance.current_imbalance())
        self.balance.window.zero_()
        self.log.event({"event": "expert_rebalance", "step": self.step, "changed": changed,
                        "imbalance_before": before_after[0], "imbalance_after_predicted": before_after[1],
                        "placements": {str(k): [list(r) for r in p.ranks] for k, p in self.balance.placements.items()}})
        return changed

    # ---- whole run -------------------------------------------------------------------------
    def fit(self) -> dict:
        resumed = self.restore()
        if not resumed and self.cfg.init:
            self.load_init()
        if not resumed:
            self.log.event({"event": "start", "layout": str(self.layout), "world_size": self.world,
                            "flops_per_token": self.flops_per_token, "peak_tflops": self.peak_tflops})
        while self.step < self.cfg.steps:
            rec = self.train_step()
            if rec is None:
                continue
            self.losses.append(rec["loss"])
            self.log.step(rec)
            if self.step % self.cfg.replica_check_every == 0:
                self.check_replicas()
            self.injector.after_step(self.step)
            if self.step % self.cfg.ckpt_every == 0 or self.step == self.cfg.steps:
                replace = self._plan_rebalance()
                held_s = self.save()
                self.log.event({"event": "checkpoint_saved", "step": self.step, "blocking_s": held_s,
                                "async": self.cfg.async_ckpt})
                if replace:  # rebuild with the new placement from the checkpoint just written
                    self.ckpt.wait()
                    self.restore()
        self.ckpt.close()
        from wanka.train.state import params_sha256

        result = {"final_loss": self.losses[-1] if self.losses else self.last_loss, "steps": self.step,
                  "restarts": self.restarts, "params_sha256": params_sha256(self), "layout": str(self.layout),
                  "world_size": self.world}
        self.log.event({"event": "done", **result})
        self.log.close()
        return result
