"""One replay from user-level arguments: a workload (trace or synthetic mix) and a policy string.

A policy string is PLACEMENT[/QUEUE][/nobf], e.g. `topo-bestfit/sjf` or `first-fit/fifo/nobf`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wanka.errors import SpecError
from wanka.sched.job import Job
from wanka.sched.metrics import summarize
from wanka.sched.placement import PLACEMENTS
from wanka.sched.replay import replay
from wanka.sched.scheduler import QUEUES, Scheduler
from wanka.sched.synthetic import synthetic_mix
from wanka.sched.trace import load_trace

DEFAULT_POLICIES = ["first-fit/fifo", "topo-bestfit/fifo", "topo-bestfit/fifo/nobf", "topo-bestfit/sjf",
                    "topo-bestfit/priority"]


@dataclass
class Workload:
    name: str
    jobs: list[Job]
    skipped: dict = field(default_factory=dict)


def parse_policy(text: str) -> dict:
    parts = text.strip().split("/")
    placement, queue, backfill = parts[0], "fifo", True
    for p in parts[1:]:
        if p in QUEUES:
            queue = p
        elif p == "nobf":
            backfill = False
        else:
            raise SpecError("policy", f"PLACEMENT[/QUEUE][/nobf] with QUEUE in {', '.join(QUEUES)}", text)
    if placement not in PLACEMENTS:
        raise SpecError("policy", f"a placement in {', '.join(PLACEMENTS)} (then /QUEUE, /nobf)", text)
    return {"policy": placement, "queue": queue, "backfill": backfill}


def parse_quotas(text: str | None, jobs: list[Job] | None = None, cluster_gpus: int = 0) -> dict[str, int] | None:
    """TENANT=GPUS,... or `share`: each tenant's quota is its share of the workload's GPU-s times
    the cluster's GPUs (rounded down, at least 1; Kueue nominal quotas for a cohort)."""
    if not text:
        return None
    if text == "share":
        work: dict[str, float] = {}
        for j in jobs or []:
            work[j.tenant] = work.get(j.tenant, 0.0) + (j.duration_s or 0.0) * j.gpus
        total = sum(work.values()) or 1.0
        return {t: max(1, int(cluster_gpus * w / total)) for t, w in sorted(work.items())}
    out = {}
    for item in text.split(","):
        tenant, sep, value = item.partition("=")
        if not sep or not tenant.strip() or not value.strip().isdigit():
            raise SpecError("--quotas", "TENANT=GPUS,... with whole numbers of GPUs, or share", item)
        out[tenant.strip()] = int(value)
    return out


def load_workload(trace: str, cluster, *, skip_bad_rows=False, limit=None, scale=1.0, seed=0, jobs=2000,
                  load=0.8) -> Workload:
    if trace == "synthetic":
        mix = synthetic_mix(cluster.gpus, jobs=jobs, seed=seed, load=load)
        return Workload(f"synthetic(seed={seed},jobs={jobs},load={load})", mix)
    t = load_trace(trace, cluster_gpus=cluster.gpus, skip_bad_rows=skip_bad_rows, limit=limit, scale=scale)
    return Workload(t.name if scale == 1 else f"{t.name} x{scale:g} arrivals", t.jobs, dict(t.skipped))


def run_policy(cluster, workload: Workload, policy: str, *, quotas=None, spare_nodes=0, spread_wait_s=0.0) -> dict:
    opts = parse_policy(policy)
    s = Scheduler(cluster, quotas=quotas, spare_nodes=spare_nodes, spread_wait_s=spread_wait_s, **opts)
    result = replay(s, workload.jobs)
    out = {"policy": policy, **summarize(result), "spread_waits": s.stats["spread_waits"]}
    out.update({"trace": workload.name, "cluster": cluster.name, "cluster_gpus": cluster.gpus,
                "skipped_rows": sum(workload.skipped.values()), "skipped": workload.skipped})
    return out
