"""Recovery policies: what a failure costs under each, and the hot-spare pool with replenishment.

    full_restart  the whole job is rescheduled; a lost node is replaced from the pool (idle nodes or
                  spares), else the job waits for its repair. ByteRobust Table 7: requeue 454-768 s
                  at 2,048-16,384 GPUs [P]; Meta RSC u0 = 5-20 min [Q].
    hot_spare     a warm standby node is swapped in (ByteRobust hot update 46-65 s [P]), then the job
                  restarts; the failed node rejoins the pool after repair (replenishment).
    elastic       no spare ready: drop the failed node's data-parallel replica and restart from the
                  checkpoint at the planner's speed for dp-1; grow back when a node returns
                  (torchelastic / Oobleck-style reconfiguration).
    torchft       per-step replica fault tolerance: the failed replica leaves the quorum and the
                  others continue without rolling back; it heals from a live peer and rejoins
                  (PyTorch blog "Fault Tolerant Llama", 2025: Gloo timeout 5 s, re-init < 1 s [P]).
Job-scoped failures (a bug every rank hits) restart the whole job under every policy.
The event loop that applies these lives in wanka.sim.engine.
"""

from __future__ import annotations

import heapq

KINDS = ("full_restart", "hot_spare", "elastic", "torchft")


def node_replacement_cost_s(kind: str, restart_s: float, requeue_s: float, swap_s: float) -> float:
    """Seconds from 'replacement node ready' to 'job computing again' (before the restore)."""
    return requeue_s if kind == "full_restart" else swap_s + restart_s


class SparePool:
    """Replacement nodes as a heap of the times they become available.

    `take(t_need, returns_at)`: the failed node goes to repair and rejoins the pool at `returns_at`
    (replenishment); the earliest available node is handed out. If it is only available after
    `t_need`, the job waits for it. With an empty pool the job waits for its own node's repair.
    """

    def __init__(self, nodes: int):
        self.size = nodes
        self.avail_at = [0.0] * nodes
        self.out: list[float] = []  # return times of nodes in repair
        self.swaps = self.waits = 0
        self.min_available = nodes

    def ready_by(self, t: float) -> bool:
        return bool(self.avail_at) and self.avail_at[0] <= t

    def ready_count(self, t: float) -> int:
        """Nodes available by t (for a failure that needs several at once)."""
        return sum(1 for a in self.avail_at if a <= t)

    def take(self, t_need: float, returns_at: float) -> float:
        avail = heapq.heappushpop(self.avail_at, returns_at) if self.avail_at else returns_at
        self.swaps += 1
        self.waits += avail > t_need
        heapq.heappush(self.out, returns_at)
        while self.out and self.out[0] <= t_need:
            heapq.heappop(self.out)
        self.min_available = min(self.min_available, max(0, self.size - len(self.out)))
        return avail

    def lend_until_return(self, returns_at: float) -> float:
        """Elastic shrink: the failed node goes to repair; reserve the next node to come back (for the
        grow-back) and return when it is available."""
        heapq.heappush(self.avail_at, returns_at)
        return heapq.heappop(self.avail_at)
