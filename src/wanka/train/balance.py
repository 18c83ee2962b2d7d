"""Per-step expert load statistics and auxiliary-loss-free bias balancing for the trainer.

Load: every MoE layer counts the (token, expert) pairs its router selected (before capacity
drops). Once per step one all-reduce over the world of a [moe layers, experts] tensor gives every
layer's load over the whole global batch (each layer lives on one pipeline stage, so the world sum
is the sum over that stage's dp ranks; tp is 1 for MoE in the runtime).

Bias balancing (DeepSeek-V3, arXiv:2412.19437 s2.1.2): after each step, expert e's selection
bias moves by gamma * sign(mean load - load_e): overloaded experts get less attractive,
underloaded more. The bias only changes which experts are selected, never the gating weights.
Every rank computes the same update from the same all-reduced loads, so replicas agree.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from wanka.train.experts import Placement, imbalance


class ExpertBalance:
    def __init__(self, spec, ep: int, bias_rate: float, distributed: bool):
        self.moe_ids = [i for i in range(spec.layers) if spec.moe is not None and i >= spec.moe.dense_layers]
        self.layers: dict = {}
        self.experts = spec.moe.experts if spec.moe is not None else 0
        self.ep, self.bias_rate, self.distributed = ep, bias_rate, distributed
        # global MoE layer index -> Placement over the EP ranks (contiguous until EPLB re-places)
        self.placements = {i: Placement.contiguous(self.experts, ep) for i in self.moe_ids}
        self.window = torch.zeros(len(self.moe_ids), self.experts, dtype=torch.float64)  # since the last rebalance
        # every rank tracks every layer's bias (same all-reduced loads), so rank 0 checkpoints them all
        self.bias = torch.zeros(len(self.moe_ids), self.experts, dtype=torch.float32)

    def bind(self, layers: dict) -> None:
        """This rank's MoE modules (global layer index -> MoE), after a (re)build."""
        self.layers = layers
        self._apply_bias()

    def rebalance(self, redundant: int, keep_window: bool = False) -> bool:
        """EPLB placements from the loads since the last rebalance; True when they changed."""
        from wanka.train.eplb import rebalance

        if self.window.sum() == 0:
            return False
        new = dict(zip(self.moe_ids, rebalance(self.window, self.ep, redundant)))
        if not keep_window:
            self.window.zero_()
        changed, self.placements = new != self.placements, new
        return changed

    def current_imbalance(self) -> float:
        """max/mean EP-rank load of the loads since the last rebalance under the current placements."""
        return imbalance(self.window, [self.placements[i] for i in self.moe_ids])

    @property
    def active(self) -> bool:
        return bool(self.moe_ids)

    def begin_step(self) -> None:
        for moe in self.layers.values():
            moe.load.zero_()
            moe.dropped = 0

    def end_step(self) -> dict:
        """All-reduce this step's loads, update the biases; the metrics fields for the step."""
        load = torch.zeros(len(self.moe_ids) + 1, self.experts, dtype=torch.float64)
        for row, layer in enumerate(self.moe_ids):
            if layer in self.layers:
                load[row] = self.layers[layer].load
                load[-1, 0] += self.layers[layer].dropped
        if self.distributed:
            dist.all_reduce(load)
        dropped, load = int(load[-1, 0]), load[:-1]
        self.window += load
        if self.bias_rate > 0:
            self.bias += self.bias_rate * (load.mean(-1, keepdim=True) - load).sign().float()
            self._apply_bias()
        per_expert = load.max(-1).values.sum() / load.mean(-1).sum()
        return {"moe_imbalance": imbalance(load, [self.placements[i] for i in self.moe_ids]), "expert_imbalance": float(per_expert),
                "moe_dropped": dropped, "expert_load": load.tolist()}

    def _apply_bias(self) -> None:
        for row, layer in enumerate(self.moe_ids):
            if layer in self.layers:
                self.layers[layer].expert_bias.copy_(self.bias[row])

    # ---- checkpointed state ------------------------------------------------------------------
    def state(self) -> dict:
        """Every layer's bias (JSON floats: exact for fp32), the placement and the load window."""
        return {"bias": self.bias.tolist(),
                "placements": {str(i): [list(r) for r in p.ranks] for i, p in self.placements.items()},
                "window": self.window.tolist()}

    @staticmethod
    def placements_in(state: dict | None) -> dict | None:
        if not state or not state.get("placements"):
            return None
        return {int(i): Placement.from_lists(r) for i, r in state["placements"].items()}

    def load_state(self, state: dict | None) -> None:
        if not state:
            return
        self.bias = torch.tensor(state["bias"], dtype=torch.float32)
        self._apply_bias()
        self.placements = self.placements_in(state) or self.placements
        if state.get("window") is not None:
            self.window = torch.tensor(state["window"], dtype=torch.float64)
