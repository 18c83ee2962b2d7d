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

`RecoveryPolicy` is the one place that says what a failure costs and whether it rolls back; both
twins apply it (wanka.sim.engine for one job, wanka.sim.multijob for jobs sharing a cluster through
the scheduler), and `StepCommits` is the step-level commit rule of per-step fault tolerance.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

KINDS = ("full_restart", "hot_spare", "elastic", "torchft")


def node_replacement_cost_s(kind: str, restart_s: float, requeue_s: float, swap_s: float) -> float:
    """Seconds from 'replacement node ready' to 'job computing again' (before the restore)."""
    return requeue_s if kind == "full_restart" else swap_s + restart_s


@dataclass(frozen=True)
class RecoveryPolicy:
    """What each recovery kind does after a failure, in seconds (sources in the module docstring and
    in wanka.sim.scenario.RecoverySpec)."""

    kind: str = "full_restart"
    restart_s: float = 300.0  # re-initialise on the same nodes
    requeue_s: float = 300.0  # full_restart after a node loss: back through the scheduler
    swap_s: float = 60.0  # hot-spare swap
    heal_s: float = 60.0  # torchft: a replica's state transfer from a live peer before it contributes
    reconfig_s: float = 5.0  # torchft: a replica leaving: the survivors' collective times out, new quorum
    join_s: float = 1.0  # torchft: a healed replica joining: every replica re-initialises its process group
    min_dp: int = 1  # elastic / torchft: fewest replicas that keep training

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"recovery kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")

    def replica_level(self, node_class: bool, job_scoped: bool, replicas_left: int) -> bool:
        """torchft: a node-class failure takes only the replicas on the lost nodes out of the quorum, and
        nothing rolls back, while at least min_dp replicas remain. Job-scoped failures always restart."""
        return self.kind == "torchft" and node_class and not job_scoped and replicas_left >= self.min_dp

    @property
    def resizes(self) -> bool:
        """The job can run on fewer replicas than it asked for (the scheduler's min_gpus)."""
        return self.kind in ("elastic", "torchft")

    def shrinks_without_spare(self, replicas_left: int, spare_ready: bool) -> bool:
        """elastic: with no replacement ready, drop the lost replicas and restart smaller."""
        return self.kind == "elastic" and replicas_left >= self.min_dp and not spare_ready

    def restart_cost_s(self, node_lost: bool) -> float:
        """From 'hardware ready' to 'computing again', before the restore."""
        if not node_lost:
            return self.restart_s
        return node_replacement_cost_s(self.kind, self.restart_s, self.requeue_s, self.swap_s)

    def rejoin_cost_s(self, on_new_gpus: bool) -> float:
        """torchft job requeued by a scheduler after losing replicas: the quorum change, plus the state
        transfer when it lands on GPUs that did not hold its state."""
        return self.reconfig_s + (self.heal_s if on_new_gpus else 0.0)

    def resize_cost_s(self, restore_s: float) -> float:
        """A planned change of the replica count (grow back, or a scheduler's resize): torchft changes the
        quorum (the new replicas join); elastic checkpoints first, then restarts and restores."""
        return self.join_s if self.kind == "torchft" else self.restart_s + restore_s


class StepCommits:
    """Step-level commit semantics of per-step fault tolerance (torchft, FT-HSDP).

    A step commits only if no replica failed during it: a failure errors the cross-replica
    all-reduce, every replica's `Manager.should_commit()` then votes False and the step in flight is
    discarded for all of them (torchft/manager.py, should_commit: local_should_commit = enough_replicas
    and no error). `advance` adds compute seconds and counts the steps that completed; `discard`
    drops the partial step and returns its compute seconds.
    """

    def __init__(self, step_time_s: float):
        self.step_time_s = step_time_s
        self.in_flight_s = 0.0
        self.committed = self.discarded = 0

    def advance(self, compute_s: float) -> None:
        if self.step_time_s <= 0:
            return
        done = self.in_flight_s + compute_s
        n = int(done // self.step_time_s)
        self.committed += n
        self.in_flight_s = done - n * self.step_time_s

    def discard(self) -> float:
        lost, self.in_flight_s = self.in_flight_s, 0.0
        if lost > 0:
            self.discarded += 1
        return lost

    def restart_from_checkpoint(self) -> None:
        """A rollback restarts at a step boundary (checkpoints are taken between steps)."""
        self.in_flight_s = 0.0


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
