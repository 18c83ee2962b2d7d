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

`RecoveryPolicy.respond(failure, replicas_left, spare_ready)` is the one place that decides what a
failure does to a job: how long detection takes, whether the job drops replicas (no rollback, the
step in flight discarded), restarts in place, waits for replacement nodes or shrinks, whether it
rolls back to its last durable checkpoint, and what the restart costs. Every twin applies its
answer: wanka.sim.engine (one job), wanka.sim.multijob (jobs sharing a cluster through the
scheduler) and wanka.sim.fleet (a whole trace). `StepCommits` is the step-level commit rule of
per-step fault tolerance.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import NamedTuple

KINDS = ("full_restart", "hot_spare", "elastic", "torchft")
# what a job does after a failure (Response.action)
DROP_REPLICAS = "drop_replicas"  # torchft: the hit replicas leave the quorum, the others go on (no rollback)
RESTART_IN_PLACE = "restart_in_place"  # the same nodes: detect, restart, restore
REPLACE_NODES = "replace_nodes"  # wait for replacement nodes (pool, scheduler or repair), then restart
SHRINK = "shrink"  # elastic with no replacement ready: restart on fewer replicas


@dataclass(frozen=True)
class Failure:
    """A failure as recovery sees it (from a wanka.reliability.failures cause)."""

    node_lost: bool  # the cause needs a node swap (recovery: node_swap), or a manual intervention
    job_scoped: bool = False  # every rank hits it (a bug): restarts the whole job under every policy
    detect: str = "explicit"  # explicit | hang (only the NCCL watchdog sees it) | injected (a kill loop)
    manual: bool = False  # a person diagnoses it (adds manual_s, always needs a node)


def failure_of(cause, manual: bool = False) -> Failure:
    """A wanka.reliability.failures.Cause (recovery, scope, detect) as a Failure."""
    return Failure(node_lost=cause.recovery == "node_swap" or manual, job_scoped=cause.scope == "job",
                   detect=cause.detect, manual=manual)


class Response(NamedTuple):
    """What a job does after a failure: `action` (above), the detection time, and the seconds from
    'hardware ready' to 'computing again' before the restore (restart, requeue or swap + restart; 0 for
    DROP_REPLICAS, whose pause is the policy's reconfig_s). A NamedTuple: one is made per failure."""

    action: str
    detect_s: float
    restart_s: float

    @property
    def rolls_back(self) -> bool:
        """Back to the last durable checkpoint; DROP_REPLICAS discards only the step in flight."""
        return self.action != DROP_REPLICAS


def node_replacement_cost_s(kind: str, restart_s: float, requeue_s: float, swap_s: float) -> float:
    """Seconds from 'replacement node ready' to 'job computing again' (before the restore)."""
    return requeue_s if kind == "full_restart" else swap_s + restart_s


@dataclass(frozen=True)
class RecoveryPolicy:
    """What each recovery kind does after a failure, in seconds (sources in the module docstring and
    in wanka.sim.scenario.RecoverySpec)."""

    kind: str = "full_restart"
    detect_s: float = 60.0  # explicit failures: ByteRobust section 2.2, ~60 s [P]
    hang_detect_s: float = 600.0  # hangs: PyTorch's NCCL watchdog default, 10 min [P]
    manual_s: float = 7200.0  # manual diagnosis [G]
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

    def detect_time_s(self, failure: Failure) -> float:
        """Seconds from the failure to its detection: a kill loop's kill is seen by the quorum change
        itself (reconfig_s), a hang only by the watchdog, a manual case after the diagnosis too."""
        base = 0.0 if failure.detect == "injected" else self.hang_detect_s if failure.detect == "hang" else self.detect_s
        return base + (self.manual_s if failure.manual else 0.0)

    def respond(self, failure: Failure, replicas_left: int, spare_ready: bool = True) -> Response:
        """The one recovery decision. `replicas_left`: replicas not hit by the failure; `spare_ready`: a
        replacement node is ready now (the job twin's pool; where a scheduler decides the size, True)."""
        detect = self.detect_time_s(failure)
        if self.replica_level(failure.node_lost, failure.job_scoped, replicas_left):
            return Response(DROP_REPLICAS, detect, 0.0)
        if not failure.node_lost:
            return Response(RESTART_IN_PLACE, detect, self.restart_s)
        if self.shrinks_without_spare(replicas_left, spare_ready):
            return Response(SHRINK, detect, self.restart_s)
        return Response(REPLACE_NODES, detect, self.restart_cost_s(node_lost=True))

    def after_preemption(self) -> Response:
        """A preempted job (second-order preemption, Kokolis et al. [Q]) rolls back and is requeued;
        its restart is charged as a failure's restart in place (detect + restart) [G]."""
        return Response(RESTART_IN_PLACE, self.detect_s, self.restart_s)

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
