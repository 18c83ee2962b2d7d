"""Expert parallelism: which rank holds which experts, token dispatch/combine with all-to-all, and
the expert-gradient reduction.

Semantics follow Megatron-Core (megatron/core/transformer/moe/token_dispatcher.py,
MoEAlltoAllTokenDispatcher; parallel_state.py): the EP group is `ep` consecutive data-parallel
ranks of one pipeline stage (EP lives inside dp*cp), the expert-data-parallel group is the ranks
with the same position in their EP group. Dispatch exchanges the per-destination token counts
first (all_to_all_single of `ep` integers), then the token rows with those split sizes; combine is
the reverse all-to-all, then a weighted index_add into the token positions.

Gradients (Megatron-Core distributed/param_and_grad_buffer.py: expert grads are reduced over the
expert-dp group only): an expert's autograd gradient on its holder already sums the contributions
of every rank of the EP group (through the all-to-all backward), so summing over expert-dp covers
all dp ranks once; dividing by dp gives the mean the dense parameters get from FSDP.

A placement may replicate an expert on several ranks of the EP group (EPLB, see eplb.py); a token
routed to a replicated expert goes to replica `row % replicas`, and replicas' gradients are summed
over the EP group before the expert-dp reduction, so replicas stay bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Placement:
    """ranks[r] = the logical experts EP rank r holds (each rank the same count; no expert twice on a rank)."""

    ranks: tuple[tuple[int, ...], ...]

    @classmethod
    def contiguous(cls, experts: int, ep: int) -> "Placement":
        per = experts // ep
        return cls(tuple(tuple(range(r * per, (r + 1) * per)) for r in range(ep)))

    @classmethod
    def from_lists(cls, lists) -> "Placement":
        return cls(tuple(tuple(int(e) for e in rank) for rank in lists))

    @property
    def ep(self) -> int:
        return len(self.ranks)

    def holders(self, expert: int) -> list[int]:
        return [r for r, held in enumerate(self.ranks) if expert in held]

    def replicated(self) -> list[int]:
        """Logical experts held by more than one rank, ascending."""
        counts: dict[int, int] = {}
        for held in self.ranks:
            for e in held:
                counts[e] = counts.get(e, 0) + 1
        return sorted(e for e, c in counts.items() if c > 1)

    def route_table(self, experts: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(holders [E, max_replicas] padded with the first holder, replica count [E])."""
        lists = [self.holders(e) for e in range(experts)]
        if not all(lists):
            raise ValueError(f"placement {self.ranks} holds no replica of expert {lists.index([])}")
        width = max(len(h) for h in lists)
        table = torch.tensor([h + [h[0]] * (width - len(h)) for h in lists], dtype=torch.long)
        return table, torch.tensor([len(h) for h in lists], dtype=torch.long)

    def rank_loads(self, load: torch.Tensor) -> torch.Tensor:
        """Tokens each EP rank computes when logical expert e receives load[e] (split evenly over replicas)."""
        _, count = self.route_table(load.shape[-1])
        per_replica = load.double() / count.double()
        return torch.stack([per_replica[..., list(held)].sum(-1) for held in self.ranks], dim=-1)


def imbalance(load: torch.Tensor, placements) -> float:
    """max/mean token load over EP ranks, each summed over layers first (vLLM eplb_state.py's
    balancedness = avg/max, inverted; 1.0 = perfect). `load` is [layers, experts]; `placements`
    one Placement for all layers or a list with one per layer."""
    load = load.reshape(-1, load.shape[-1])
    if isinstance(placements, Placement):
        placements = [placements] * load.shape[0]
    per_rank = torch.stack([p.rank_loads(row) for p, row in zip(placements, load)])
    mx, mean = per_rank.max(-1).values.sum(), per_rank.mean(-1).sum()
    return float(mx / mean) if mean > 0 else 1.0


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with split sizes; the backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out_splits, in_splits = ctx.splits
        back = grad.new_empty((sum(in_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits, group=ctx.group)
        return back, None, None, None


class ExpertDispatcher:
    """This rank's view of one EP group: sends each (token, expert) pair to a holder of the expert."""

    def __init__(self, group, ep_rank: int, placement: Placement, experts: int):
        self.group, self.ep_rank, self.placement = group, ep_rank, placement
        self.table, self.count = placement.route_table(experts)
        self.local = placement.ranks[ep_rank]

    def run(self, flat: torch.Tensor, top_i: torch.Tensor, top_w: torch.Tensor, keep: torch.Tensor,
            experts: torch.nn.ModuleDict) -> torch.Tensor:
        """Weighted sum of the kept (token, expert) pairs' expert outputs, [T, hidden]."""
        ep = self.placement.ep
        rows, slots = keep.nonzero(as_tuple=True)
        exp = top_i[rows, slots]
        dest = self.table[exp, rows % self.count[exp]]
        order = torch.sort(dest * self.table.shape[0] + exp, stable=True).indices  # by destination, then expert
        rows, slots, exp, dest = rows[order], slots[order], exp[order], dest[order]
        send = torch.bincount(dest, minlength=ep)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)  # exchange the counts first
        send_l, recv_l = send.tolist(), recv.tolist()
        x_recv = _AllToAll.apply(flat[rows], recv_l, send_l, self.group)
        e_recv = exp.new_empty(sum(recv_l))
        dist.all_to_all_single(e_recv, exp, recv_l, send_l, group=self.group)
        y_recv = torch.zeros_like(x_recv)
        for e in self.local:  # every local expert runs, on zero rows too, so each has a gradient
            idx = (e_recv == e).nonzero(as_tuple=True)[0]
            expert = experts[str(e)]
            rows_e = x_recv[idx]  # FSDP's bf16 compute leaves the (ignored) expert weights in fp32
            y_recv = y_recv.index_add(0, idx, expert(rows_e.to(expert.w1.weight.dtype)).to(rows_e.dtype))
        y = _AllToAll.apply(y_recv, send_l, recv_l, self.group)
        return torch.zeros_like(flat).index_add(0, rows, y * top_w[rows, slots, None])


def build_ep_groups(dims, rank: int):
    """(EP group, expert-dp group) of `rank`; every rank creates every group in the same order."""
    ep, dp, tp, pp = dims.ep, dims.dp, dims.tp, dims.pp
    mine = [None, None]
    for s in range(pp):
        for t in range(tp):
            ranks_of = lambda d: (s * dp + d) * dims.cp * tp + t  # mesh (pp, dp, cp, tp); cp is 1 with ep
            for g in range(dp // ep):
                members = [ranks_of(g * ep + i) for i in range(ep)]
                group = dist.new_group(members)
                if rank in members:
                    mine[0] = group
            for i in range(ep):
                members = [ranks_of(g * ep + i) for g in range(dp // ep)]
                group = dist.new_group(members)
                if rank in members:
                    mine[1] = group
    return mine[0], mine[1]


class ExpertGradSync:
    """Reduces the local experts' gradients: replicas summed over the EP group, then summed over
    expert-dp, then divided by dp (the dense parameters' FSDP mean)."""

    def __init__(self, moe_layers: dict, placements: dict, ep_rank: int, ep_group, expert_dp_group,
                 expert_dp: int, dp: int):
        """moe_layers and placements keyed by global layer index."""
        self.layers, self.placements, self.ep_rank = moe_layers, placements, ep_rank
        self.ep_group, self.expert_dp_group = ep_group, expert_dp_group
        self.expert_dp, self.dp = expert_dp, dp

    def params(self) -> list[torch.nn.Parameter]:
        return [p for moe in self.layers.values() for p in moe.experts.parameters()]

    def _grads(self, moe, e: int) -> list[torch.Tensor]:
        ps = list(moe.experts[str(e)].parameters())
        for p in ps:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return [p.grad for p in ps]

    def reduce(self) -> None:
        replicated = [(k, e) for k in self.layers for e in self.placements[k].replicated()]
        if replicated and self.ep_group is not None:
            # one buffer over (layer, replicated expert); non-holders contribute zeros
            template = next(iter(self.layers.values()))
            size = sum(p.numel() for p in template.experts[str(template.local_experts[0])].parameters())
            buf = torch.zeros(len(replicated) * size, device=self.params()[0].device)
            slots = []
            for i, (k, e) in enumerate(replicated):
                if e in self.placements[k].ranks[self.ep_rank]:
                    grads = self._grads(self.layers[k], e)
                    buf[i * size:(i + 1) * size] = torch.cat([g.reshape(-1) for g in grads])
                    slots.append((i * size, grads))
            dist.all_reduce(buf, group=self.ep_group)
            for off, grads in slots:
                pos = off
                for g in grads:
                    g.copy_(buf[pos:pos + g.numel()].view_as(g))
                    pos += g.numel()
        grads = [g for moe in self.layers.values() for e in moe.local_experts for g in self._grads(moe, e)]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        if self.expert_dp > 1:
            dist.all_reduce(flat, group=self.expert_dp_group)
        flat /= self.dp
        pos = 0
        for g in grads:
            g.copy_(flat[pos:pos + g.numel()].view_as(g))
            pos += g.numel()

    def norm_sq(self) -> torch.Tensor:
        """Squared L2 norm of all experts' gradients, each logical expert counted once."""
        sq = torch.zeros((), dtype=torch.float64)
        for k, moe in self.layers.items():
            for e in moe.local_experts:
                if self.placements[k].holders(e)[0] != self.ep_rank:
                    continue  # a replica: its first holder counts it
                for p in moe.experts[str(e)].parameters():
                    if p.grad is not None:
                        sq += p.grad.double().pow(2).sum().cpu()
        if self.ep_group is not None:
            dist.all_reduce(sq, group=self.ep_group)
        return sq
