"""Job speeds for the twin, from the planner (`wanka.plan.estimate`).

The twin needs: the job's step time and tokens/s (for goodput in tokens), its data-parallel degree
and replica size (what one node failure takes out), and its relative speed with k < dp replicas for
elastic shrink. With a planner, the speed with k replicas is tokens_per_s(k replicas) /
tokens_per_s(dp replicas) at the same global batch; a job with an explicit step_time_s, or without
a model and layout, runs at k/dp, which the output says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wanka.cluster import Cluster, load_cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan import estimate


@dataclass(frozen=True)
class JobSpeed:
    step_time_s: float | None
    tokens_per_s: float | None
    dp: int
    replica_gpus: int
    speed_of_dp: tuple[float, ...]
    source: str  # planner | explicit | linear


def _linear(dp: int) -> tuple[float, ...]:
    return tuple(k / dp for k in range(dp + 1))


def job_speed(job, cluster: Cluster, gpus: int, cluster_ref: str | dict, field: str = "jobs[0]",
              shrink_points: int = 4) -> JobSpeed:
    """Speeds for `job` (a JobSpec) on `gpus` GPUs of `cluster` (loaded from `cluster_ref`)."""
    model = layout = None
    if job.model is not None:
        from wanka.workload import load_model  # noqa: PLC0415

        model = load_model(job.model)
    if job.layout is not None:
        layout = Layout.parse(job.layout, field=f"{field}.layout")
        if layout.dp is not None and layout.tp * layout.pp * layout.cp * layout.dp != gpus:
            # a sweep over sizes drops dp from the layout (sweep.with_param); a file that states both must agree
            raise SpecError(f"{field}.layout", f"tp*pp*cp*dp equal to the job's {gpus} GPUs, or no dp",
                            job.layout)
    replica = (layout.tp * layout.pp * layout.cp) if layout is not None else cluster.gpus_per_node
    if gpus % replica:
        raise SpecError(f"{field}.gpus", f"a multiple of the replica size tp*pp*cp = {replica}", gpus)
    dp = gpus // replica
    tokens_per_step = None
    gbs = (layout.gbs or dp * layout.mbs) if layout is not None else None
    if model is not None and gbs is not None:
        tokens_per_step = gbs * model.seq_len
    if job.step_time_s is not None or model is None or layout is None:
        step = job.step_time_s
        tps = tokens_per_step / step if (tokens_per_step and step) else None
        return JobSpeed(step, tps, dp, replica, _linear(dp), "explicit" if step else "linear")
    own = cluster if gpus == cluster.gpus else load_sized_cluster(cluster_ref, gpus)
    full = estimate(model, own, replace(layout, dp=dp))
    speeds = list(_linear(dp))
    # price a few shrunk sizes with the planner and interpolate between them (each estimate costs ms)
    ks = sorted({max(1, dp - j * max(1, dp // 8)) for j in range(shrink_points)} | {dp})
    priced = {}
    for k in ks:
        sub = load_sized_cluster(cluster_ref, max(cluster.gpus_per_node, k * replica)) if k < dp else own
        # the same global batch where dp*mbs divides it, else the nearest batch that k replicas can split
        per = k * layout.mbs
        gbs_k = max(per, round(gbs / per) * per) if layout.gbs else per
        est = full if k == dp else estimate(model, sub, replace(layout, dp=k, gbs=gbs_k))
        if est.fits:  # a shrunk size that runs out of memory is not a speed the job can have
            priced[k] = est.tokens_per_s / full.tokens_per_s
    if len(priced) >= 2:
        xs = sorted(priced)
        for k in range(1, dp + 1):
            if k < xs[0]:  # below the smallest priced size: proportional to replicas
                speeds[k] = priced[xs[0]] * k / xs[0]
                continue
            lo = max([x for x in xs if x <= k], default=xs[0])
            hi = min([x for x in xs if x >= k], default=xs[-1])
            f = 0.0 if hi == lo else (k - lo) / (hi - lo)
            speeds[k] = min(1.0, priced[lo] + f * (priced[hi] - priced[lo]))
        for k in range(1, dp + 1):  # more replicas are never slower
            speeds[k] = max(speeds[k], speeds[k - 1])
    return JobSpeed(full.step_time_s, full.tokens_per_s, dp, replica, tuple(speeds), "planner")


def inline_cluster(spec: dict, **overrides) -> Cluster:
    """A cluster written inline in a scenario (DESIGN.md's cluster spec), validated as the cluster layer
    validates a spec file (`parse_cluster_spec`, then `Cluster`); errors name `cluster.<field>`."""
    try:
        parsed = parse_cluster_spec({**spec, **overrides})
        if parsed.scale_out.topology == "explicit":  # its host table is a file next to a spec file
            raise SpecError("scale_out.topology", "a generated topology inline (an explicit tree needs a spec file)",
                            "explicit")
        return Cluster(parsed)
    except SpecError as exc:
        raise SpecError(f"cluster.{exc.field}", exc.expected, exc.got) from None


def _load(ref: str | dict, **overrides) -> Cluster:
    return inline_cluster(ref, **overrides) if isinstance(ref, dict) else load_cluster(ref, **overrides)


def load_sized_cluster(ref: str | dict, gpus: int | None) -> Cluster:
    """The cluster `ref` (a preset, a spec file or an inline spec) resized to `gpus`; a fabric too small
    for that size gets a third tier."""
    if not gpus:
        return _load(ref)
    try:
        return _load(ref, gpus=gpus)
    except SpecError as exc:
        if not exc.field.removeprefix("cluster.").startswith("scale_out"):
            raise
        scale_out = _load(ref).spec.scale_out.model_dump(exclude_unset=True)
        return _load(ref, gpus=gpus, scale_out={**scale_out, "tiers": 3})
