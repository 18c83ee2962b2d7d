"""The fill and flush of Megatron-Core's interleaved schedule with overlap_p2p_comm
(plan/interleaved.fill_flush_p2p_s) against an event simulation of the schedule's own order.

The order is forward_backward_pipelining_with_interleaving's (megatron/core/pipeline_parallel/
schedules.py): virtual micro-batch k runs model chunk (k mod pp*vpp) // pp (reversed for backwards)
of micro-batch (k // (pp*vpp)) * pp + k mod pp; a stage runs 2 (pp - rank - 1) + (vpp - 1) pp warmup
forwards (all of them when m == pp), then one forward and one backward at a time, then the
remaining backwards. With overlap_p2p_comm a send is posted as its chunk ends, so a chunk waits only
for its input: the previous stage's (or, across a chunk boundary, the last stage's) output plus one
transfer."""

import dataclasses

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan.estimate import estimate
from wanka.plan.exposure import Options
from wanka.plan.interleaved import fill_flush_p2p_s
from wanka.workload import load_model


def _stage_order(pp: int, vpp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    total = m * vpp

    def chunk(k: int, forward: bool) -> int:
        c = (k % (pp * vpp)) // pp
        return c if forward else vpp - 1 - c

    def microbatch(k: int) -> int:
        return (k // (pp * vpp)) * pp + k % pp

    warmup = total if m == pp else min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)
    order = [("F", microbatch(k), chunk(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        order += [("F", microbatch(k + warmup), chunk(k + warmup, True)), ("B", microbatch(k), chunk(k, False))]
    order += [("B", microbatch(k), chunk(k, False)) for k in range(total - warmup, total)]
    return order


def simulated_step_s(pp: int, vpp: int, m: int, f: float, b: float, transfer: float) -> float:
    """Makespan of one step: f, b one chunk's forward/backward, `transfer` one hop between stages."""
    orders = {s: _stage_order(pp, vpp, m, s) for s in range(pp)}
    at = {s: 0 for s in range(pp)}
    free = {s: 0.0 for s in range(pp)}
    ended: dict[tuple[str, int, int, int], float] = {}
    while any(at[s] < len(orders[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while at[s] < len(orders[s]):
                kind, j, c = orders[s][at[s]]
                if kind == "F":
                    dep = ("F", j, c, s - 1) if s > 0 else (("F", j, c - 1, pp - 1) if c > 0 else None)
                else:
                    dep = ("B", j, c, s + 1) if s < pp - 1 else (("B", j, c + 1, 0) if c < vpp - 1 else None)
                if dep is not None and dep not in ended:
                    break
                ready = 0.0 if dep is None else ended[dep] + transfer
                free[s] = max(free[s], ready) + (f if kind == "F" else b)
                ended[(kind, j, c, s)] = free[s]
                at[s] += 1
                moved = True
        assert moved, "the schedule order deadlocked"
    return max(free.values())


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (8, 6, 16), (8, 12, 16), (6, 8, 6), (4, 1, 8)])
def test_fill_flush_transfers_match_the_schedule(pp, vpp, m):
    f, b, transfer = 1.0, 2.0, 0.1  # transfers shorter than a chunk: the 1F1B body hides them
    no_transfer = simulated_step_s(pp, vpp, m, f, b, 0.0)
    assert no_transfer == pytest.approx(m * vpp * (f + b) + (pp - 1) * (f + b))  # the (pp-1)/vpp bubble
    extra = simulated_step_s(pp, vpp, m, f, b, transfer) - no_transfer
    assert extra == pytest.approx(fill_flush_p2p_s(transfer, vpp, pp))
    if vpp > 1:  # more than the 2 (pp - 1) hops of a non-interleaved pipeline
        assert extra > 2 * (pp - 1) * transfer * 1.5


def test_estimate_prices_the_ring_in_the_bubble():
    model, cluster = load_model("gpt3-175b"), load_cluster("meta-24k-h100", gpus=512)
    lay = Layout.parse("tp=4,pp=8,vpp=6,mbs=1,gbs=256,zero=1,recompute=none,precision=bf16,sp=true")
    base = Options(pp_p2p_overlap=False)
    serial = estimate(model, cluster, lay, options=base)
    hidden = estimate(model, cluster, lay, options=dataclasses.replace(base, pp_p2p_overlap=True))
    m, vpp, pp = serial.layout.microbatches, 6, 8
    hop = serial.breakdown["pp_comm"] / (m * 2 * vpp)  # serial: 2 vpp transfers per micro-batch
    assert hop > 0
    # the overlapped fill and flush carry 2 (vpp pp - 1) hops, not the (pp - 1)/vpp share of the
    # 2 vpp per micro-batch that the serial bubble keeps
    assert hidden.breakdown["pipeline_bubble"] == pytest.approx(
        serial.breakdown["pipeline_bubble"] - (pp - 1) * 2 * hop + fill_flush_p2p_s(hop, vpp, pp), rel=1e-9)
    assert hidden.breakdown["pipeline_bubble"] > serial.breakdown["pipeline_bubble"]
