"""Expert placement balance under skewed routing: imbalance (max/mean token load over EP ranks) and
the EP layer's step time with the contiguous placement, then after EPLB re-placement
(train/eplb.py) without and with redundant replicas.

    python benchmarks/moe_balance.py [--ep 2] [--experts 8] [--zipf 1.2] [--redundant 2] [--tokens 2048]

Routing is planted: every rank draws its tokens' top-k experts from a Zipf(a) law over a random
expert order (the shape of the load skew DeepSeek's EPLB notes use; seed 0), so the benchmark
isolates placement from router training. Each step is the real ExpertDispatcher forward + backward
(count exchange, all_to_all_single dispatch, local SwiGLU experts, combine) on gloo; the step time
is the slowest rank's (all-to-all waits for it): the median of --steps, best of --rounds
interleaved rounds. The goal is imbalance <= 1.10
after rebalancing; on CPU the step time also carries the all-to-all copies, so it falls by less
than the imbalance does.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from wanka.train.eplb import balanced_placement
from wanka.train.experts import ExpertDispatcher, Placement, imbalance
from wanka.model.layers import FeedForward


def _routing(args, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(args.experts, generator=gen)
    weights = 1.0 / (torch.arange(1, args.experts + 1, dtype=torch.float64) ** args.zipf)
    law = torch.empty(args.experts, dtype=torch.float64)
    law[order] = weights / weights.sum()
    gen.manual_seed(1 + rank)
    top_i = torch.multinomial(law.expand(args.tokens, -1), args.top_k, replacement=False, generator=gen)
    top_w = torch.full(top_i.shape, 1.0 / args.top_k)
    return top_i, top_w


def _time_placement(args, rank: int, placement: Placement, x, top_i, top_w) -> float:
    torch.manual_seed(0)
    experts = torch.nn.ModuleDict({str(e): FeedForward(args.hidden, args.ffn) for e in placement.ranks[rank]})
    disp = ExpertDispatcher(None, rank, placement, args.experts)
    keep = torch.ones_like(top_i, dtype=torch.bool)
    times = []
    for step in range(args.steps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        out = disp.run(x, top_i, top_w, keep, experts)
        out.sum().backward()
        dt = torch.tensor(time.perf_counter() - t0)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if step >= 2:
            times.append(float(dt))
    return statistics.median(times)


def _worker(rank: int, args, port: int, out) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.ep)
    top_i, top_w = _routing(args, rank)
    load = torch.bincount(top_i.flatten(), minlength=args.experts).double()
    dist.all_reduce(load)
    x = torch.randn(args.tokens, args.hidden, generator=torch.Generator().manual_seed(rank))
    candidates = [("contiguous", Placement.contiguous(args.experts, args.ep)),
                  ("eplb", balanced_placement(load, args.ep)),
                  (f"eplb+{args.redundant}", balanced_placement(load, args.ep, args.redundant))]
    best = [float("inf")] * len(candidates)
    for _ in range(args.rounds):  # interleaved rounds, best median per placement: robust to other load
        for i, (_, placement) in enumerate(candidates):
            best[i] = min(best[i], _time_placement(args, rank, placement, x, top_i, top_w))
    rows = [(name, imbalance(load[None], p), t, p.ranks) for (name, p), t in zip(candidates, best)]
    if rank == 0:
        out.extend(rows)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--zipf", type=float, default=1.2)
    ap.add_argument("--redundant", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per rank per step")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per placement and round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best median counts")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with mp.Manager() as manager:
        out = manager.list()
        mp.spawn(_worker, args=(args, port, out), nprocs=args.ep, join=True)
        rows = list(out)
    base = rows[0][2]
    print(f"ep={args.ep} experts={args.experts} top_k={args.top_k} zipf={args.zipf} tokens/rank={args.tokens}")
    print(f"{'placement':<12} {'imbalance':>9} {'step ms':>8} {'vs contiguous':>13}  ranks")
    for name, imb, step, ranks in rows:
        print(f"{name:<12} {imb:9.3f} {step * 1e3:8.1f} {base / step:12.2f}x  {[list(r) for r in ranks]}")


if __name__ == "__main__":
    main()
