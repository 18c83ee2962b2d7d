"""Top-k routed experts (Mixtral, arXiv:2401.04088 section 2.1: softmax router -> top-k ->
renormalised weights; optional shared experts) with the Switch load-balancing loss
E * sum_i f_i * P_i (Fedus et al. 2021, arXiv:2101.03961 eq. 4) and the training runtime's knobs
(bias balancing, capacity, expert-parallel dispatcher, load statistics; see the class docstring).
Serving runs the same module with autograd off: no knob set, experts without rows skipped, no
balancing loss computed (it is a training quantity).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from wanka.model.layers import FeedForward
from wanka.workload.spec import ModelSpec


class _AuxLossGrad(torch.autograd.Function):
    """Identity on the MoE output whose backward also hands the layer's load-balancing loss the
    gradient `scale` (= coefficient / micro-batches the loss is averaged over): the balancing loss
    reaches the router of every layer without travelling to the loss, so it works on every
    pipeline stage (Megatron-Core's MoEAuxLossAutoScaler does the same)."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(aux)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


class MoE(nn.Module):
    """Top-k routed experts. `aux_scale` (set by the trainer) > 0 adds aux_scale x the balancing
    loss to the gradients (_AuxLossGrad).

    Training-side knobs, set by the trainer (train/experts.py, train/balance.py):
    - `expert_bias` (buffer, zeros unless bias balancing is on): added to the router
      probabilities for the top-k *selection* only; the gating weights stay the plain
      probabilities (DeepSeek-V3, arXiv:2412.19437 s2.1.2, auxiliary-loss-free balancing).
    - `capacity_factor` (None: dropless): each expert keeps at most
      ceil(factor * tokens * top_k / experts) of this rank's (token, expert) pairs, the ones with
      the highest router probability (GShard arXiv:2006.16668 s2.2 capacity; Megatron-Core's
      moe_token_drop_policy="probs"); dropped pairs contribute nothing.
    - `dispatcher` (None: every expert local): an ExpertDispatcher sending pairs to their EP rank.
    - `load`: tokens selected per expert since the trainer last read it (before drops).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        moe = spec.moe
        assert moe is not None
        self.top_k, self.n_experts = moe.top_k, moe.experts
        self.router = nn.Linear(spec.hidden, moe.experts, bias=False)
        # keyed by global expert id so that an EP rank holding a subset keeps the global names
        self.experts = nn.ModuleDict({str(e): FeedForward(spec.hidden, moe.ffn_hidden, spec.activation)
                                      for e in range(moe.experts)})
        if moe.shared_experts:
            self.shared = FeedForward(spec.hidden, moe.shared_experts * moe.ffn_hidden, spec.activation)
        self.register_buffer("expert_bias", torch.zeros(moe.experts), persistent=False)
        self.aux_loss = torch.zeros(())
        self.aux_scale = 0.0
        self.capacity_factor: float | None = None
        self.dispatcher = None
        self.load = torch.zeros(moe.experts, dtype=torch.float64)
        self.dropped = 0
        self.recording = True  # False while pipelining's shape inference runs the stage on placeholders

    @property
    def local_experts(self) -> list[int]:
        return [int(k) for k in self.experts.keys()]

    def keep_experts(self, experts) -> None:
        """Drop the experts this rank does not hold."""
        for k in list(self.experts.keys()):
            if int(k) not in experts:
                del self.experts[k]

    def _keep_mask(self, top_i: torch.Tensor, top_w: torch.Tensor) -> torch.Tensor | None:
        """Which (token, slot) pairs fit their expert's capacity; None when dropless (all do)."""
        if self.capacity_factor is None:
            return None
        keep = torch.ones_like(top_i, dtype=torch.bool)
        capacity = math.ceil(self.capacity_factor * top_i.numel() / self.n_experts)
        flat_i, flat_w = top_i.reshape(-1), top_w.reshape(-1).detach()
        flat_keep = keep.reshape(-1)
        for e in range(self.n_experts):
            pos = (flat_i == e).nonzero(as_tuple=True)[0]
            if pos.numel() > capacity:
                ranked = pos[torch.sort(flat_w[pos], descending=True, stable=True).indices]
                flat_keep[ranked[capacity:]] = False
        return keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        training = torch.is_grad_enabled()
        probs = F.softmax(self.router(flat).float(), dim=-1)
        top_i = (probs + self.expert_bias).topk(self.top_k, dim=-1).indices  # bias: selection only
        top_w = probs.gather(-1, top_i)
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(x.dtype)
        keep = self._keep_mask(top_i, top_w)
        if training and self.recording:
            self.load += torch.bincount(top_i.flatten(), minlength=self.n_experts).double()
            self.dropped += 0 if keep is None else int((~keep).sum())
        if self.dispatcher is not None:
            keep = torch.ones_like(top_i, dtype=torch.bool) if keep is None else keep
            out = self.dispatcher.run(flat, top_i, top_w, keep, self.experts)
        else:
            out = torch.zeros_like(flat)
            for key, expert in self.experts.items():
                chosen = top_i == int(key)
                rows, slot = (chosen if keep is None else chosen & keep).nonzero(as_tuple=True)
                # In training every expert runs, even on zero rows, so each gets a (zero) gradient:
                # under FSDP all ranks must reduce-scatter the same set of gradients.
                if rows.numel() or training:
                    out.index_add_(0, rows, expert(flat[rows]) * top_w[rows, slot, None])
        if training:
            # Switch load-balancing loss: f_e = share of routed slots to e, P_e = mean router prob.
            n_exp = probs.shape[-1]
            f = torch.bincount(top_i.flatten(), minlength=n_exp).float() / top_i.numel()
            self.aux_loss = n_exp * (f * probs.mean(0)).sum()
        if hasattr(self, "shared"):
            out = out + self.shared(flat)
        if self.aux_scale > 0 and torch.is_grad_enabled():
            out = _AuxLossGrad.apply(out, self.aux_loss, self.aux_scale)
        return out.view(shape)
