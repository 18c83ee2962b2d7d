"""ZeRO-3 / FSDP: parameters gathered unit by unit, each gather prefetched under the compute of
the unit before it, gradients reduce-scattered unit by unit (docs/plan.md "ZeRO-3").

A *unit* is what one gather fetches (Options.zero3_unit):
  layer   a whole transformer block (FSDP / FSDP2 wrap one block per unit; torchtitan, Megatron-FSDP).
  weight  one weight matrix at a time, as DeepSpeed ZeRO-3 fetches the parameters of each
          submodule in its pre-forward hook (deepspeed/runtime/zero/stage3.py, fetch_sub_module /
          prefetch_next_sub_modules: the prefetch bucket, 5e7 elements by default, is smaller than
          one weight matrix of a large model, so the prefetch reaches one submodule ahead).
Parameters outside the blocks (embedding, output layer, final norm) are one more unit, gathered at
the start of the forward and of the backward with nothing to hide behind.

One-ahead prefetch: while unit j computes, the gather of unit j+1 runs (and, when gradients are
overlapped, the reduce-scatter of the unit that just finished its backward), so unit j costs
max(c_j, g_{j+1} + rs_{j-1}) and the exposed part is what exceeds c_j. Without gradient overlap
(DeepSpeed overlap_comm=false -- the stage-1/2 default; stage 3 defaults to true since its
release, zero/config.py -- the reduce-scatter runs on the compute stream) every reduce-scatter is
exposed. DeepSpeed stage 3 also keeps a weight gathered when its next use is near
(stage3_max_reuse_distance: recompute_kept) and stops prefetching while too many parameters are
gathered (stage3_max_live_parameters: exposed_s's max_live).

Compute of a unit: the layer's forward time split by GEMM FLOPs, the attention core placed with
the projection that feeds it; backward scales each unit by the layer's backward/forward ratio.
Full recompute replays each layer's forward (and its gathers) inside the backward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wanka.plan.memo import memo_by_identity
from wanka.workload.flops import attention_gemms, layer_gemms

UNITS = ("layer", "weight")


@dataclass(frozen=True)
class Unit:
    fwd_s: float  # forward compute of the unit (one micro-batch)
    bwd_s: float
    dense_params: float  # per GPU, gathered over the dense DP group
    expert_params: float  # per GPU, gathered over the expert DP group


@memo_by_identity(1)
def layer_units(model, moe_layer: bool, fwd_s: float, bwd_s: float, attn_fwd_s: float, tp: int, ep: int,
                unit: str, etp: int | None = None) -> tuple[Unit, ...]:
    """The units of one layer in forward order; fwd_s, bwd_s: the layer's priced compute."""
    gemms = layer_gemms(model, moe_layer)
    experts = model.moe.experts if (moe_layer and model.moe is not None) else 0

    def params(g):
        split = (etp or tp) if g.expert else tp
        p = g.k * g.n / (split if g.tp_split in ("n", "k") else 1)
        return (0.0, p * experts / ep) if g.expert else (p, 0.0)

    flops = [g.k * g.n * g.per_token for g in gemms]
    attn = min(attn_fwd_s, fwd_s)
    fwd = [(fwd_s - attn) * f / sum(flops) for f in flops]
    ratio = bwd_s / fwd_s if fwd_s > 0 else 2.0
    units = [Unit(f, f * ratio, *params(g)) for f, g in zip(fwd, gemms)]
    if unit == "weight":
        # the attention core (softmax, dropout: submodules without parameters) runs between QKV and
        # the out-projection in the forward, between the out-projection and QKV in the backward
        core = len(attention_gemms(model)) - 1
        return tuple(units[:core] + [Unit(attn, attn * ratio, 0.0, 0.0)] + units[core:])
    return (Unit(fwd_s, bwd_s, sum(u.dense_params for u in units), sum(u.expert_params for u in units)),)


def exposed_s(items: list[tuple], grad_overlap: bool, max_live: float = math.inf) -> float:
    """Exposed communication of one pass: items = (compute, gather, reduce_scatter, weight[, live])
    in execution order; weight repeats an item whose neighbours are identical to itself (a middle
    layer of a run stands for count - 2 layers; a window counts with the weight of its last item); live: parameters gathered while the item computes
    (its own and those kept for a later use; default 0). The first gather has nothing to hide under.

    Each gather is prefetched from the start of the first item after the previous gather's unit
    whose live parameters are under max_live (DeepSpeed stage3_max_live_parameters) and hides
    under the compute from there to its own unit, together with the reduce-scatters launched in
    that window (those of the items before it, one unit behind); items with no gather (no
    parameters, or kept gathered) are skipped by the prefetch and lengthen the window."""
    if not items:
        return 0.0
    c = [it[0] for it in items]
    live = [it[4] if len(it) > 4 else 0.0 for it in items]
    rs = [it[2] if grad_overlap else 0.0 for it in items]
    out = items[0][1] + (0.0 if grad_overlap else sum(it[3] * it[2] for it in items))
    p = 0  # the item whose fetch came last
    for k in range(1, len(items)):
        if items[k][1] <= 0:
            continue
        launch = next((i for i in range(p, k) if live[i] < max_live), k)
        hidden_rs = sum(rs[max(p - 1, 0):k - 1])
        out += items[k - 1][3] * max(0.0, items[k][1] + hidden_rs - sum(c[launch:k]))
        p = k
    if grad_overlap:  # reduce-scatters after the last gather, the last one ends the backward
        tail = rs[max(p - 1, 0):-1]
        out += items[-1][3] * max(0.0, sum(tail) - sum(c[p:])) + rs[-1]
    return out


def _layers(runs):
    """(units, weight) per layer in forward order; a run of k >= 3 identical layers is its first
    layer, one middle layer of weight k - 2, and its last layer."""
    out = []
    for units, count in runs:
        if count <= 0:
            continue
        if count <= 3:
            out += [(units, 1.0)] * count
        else:
            out += [(units, 1.0), (units, float(count - 2)), (units, 1.0)]
    return out


def _per_unit(price):
    """price(unit) once per distinct unit (the layers of a run share theirs)."""
    seen: dict[int, float] = {}

    def one(u: Unit) -> float:
        if id(u) not in seen:
            seen[id(u)] = price(u)
        return seen[id(u)]
    return one


def _numel(u: Unit) -> float:
    return u.dense_params + u.expert_params


def recompute_kept(units: tuple[Unit, ...], reuse_distance: float) -> list[bool]:
    """Which units of a layer stay gathered from their recomputed forward to their backward:
    DeepSpeed's stage-3 coordinator keeps a parameter whose next use is fewer than
    stage3_max_reuse_distance elements of other parameters away (stage3.py@v0.3.13
    PartitionedParameterCoordinator._keep_for_later / PrefetchCoordinator.get_reuse_distance_in_numel).
    Between unit i's recomputed forward and its backward run the forward and the backward of the
    units after it: 2 * their parameters."""
    after = [sum(_numel(v) for v in units[i + 1:]) for i in range(len(units))]
    return [_numel(u) > 0 and 2 * a < reuse_distance for u, a in zip(units, after)]


def microbatch_exposed_s(runs: list[tuple[tuple[Unit, ...], int]], extra: Unit, full_recompute: bool, gather,
                         reduce_scatter, grad_overlap: bool, reuse_distance: float = 0.0,
                         max_live: float = math.inf, keep_unsharded: bool = False) -> tuple[float, float]:
    """(exposed, total) ZeRO-3 communication seconds of one micro-batch on one rank.

    runs: the rank's layers in forward order as (units of one layer, number of such layers);
    gather(unit) and reduce_scatter(unit) price one unit's collectives; reuse_distance and max_live
    as recompute_kept and exposed_s (DeepSpeed stage 3).
    keep_unsharded (Options.fsdp2_keep_unsharded, torchtitan's FSDP2): the root unit and the last
    layer stay gathered from the forward into the backward; a full-recompute replay inside a unit
    re-uses the backward's gather of that unit; the root's reduce-scatter runs after the whole
    backward (FSDP2's final callback), exposed."""
    layers = _layers(runs)
    gather, reduce_scatter = _per_unit(gather), _per_unit(reduce_scatter)
    g_extra, rs_extra = gather(extra), reduce_scatter(extra)
    fwd = [(extra.fwd_s, g_extra, 0.0, 1.0, _numel(extra))]
    bwd = [(extra.bwd_s, 0.0, 0.0, 1.0, _numel(extra)) if keep_unsharded
           else (extra.bwd_s, g_extra, rs_extra, 1.0, _numel(extra))]
    for units, w in layers:
        fwd += [(u.fwd_s, gather(u), 0.0, w, _numel(u)) for u in units]
    for i, (units, w) in enumerate(reversed(layers)):
        g = (lambda u: 0.0) if (keep_unsharded and i == 0) else gather  # noqa: E731 -- the last layer stays gathered
        kept = recompute_kept(units, reuse_distance) if full_recompute else [False] * len(units)
        held = [sum(_numel(v) for v, k in zip(units[:j], kept[:j]) if k) for j in range(len(units))]
        if full_recompute:
            bwd += [(u.fwd_s, g(u), 0.0, w, _numel(u) + h) for u, h in zip(units, held)]
        again = (lambda u: 0.0) if (keep_unsharded and full_recompute) else g  # noqa: E731
        bwd += [(u.bwd_s, 0.0 if k else again(u), reduce_scatter(u), w, _numel(u) + h)
                for u, k, h in reversed(list(zip(units, kept, held)))]
    final_rs = rs_extra if keep_unsharded else 0.0
    total = sum(x[3] * (x[1] + x[2]) for x in fwd + bwd) + final_rs
    return exposed_s(fwd, grad_overlap, max_live) + exposed_s(bwd, grad_overlap, max_live) + final_rs, total


def zero3_microbatch_s(cluster, model, lay, runs, dense_params: float, expert_params: float, opts) -> tuple[float, float]:
    """(exposed, total) ZeRO-3 seconds of one micro-batch on the rank whose layers are `runs`
    ((LayerTime, count, is_moe, layer forward s, layer backward s) from the estimator); the rank
    holds dense_params / expert_params per GPU in all. Groups: dp*cp ranks at stride tp (dense),
    the expert data-parallel ranks at stride ep*etp (routed experts), as
    wanka.plan.exposure.dp_comm places them. HSDP (Layout dp_shard < dp: torchtitan dp_replicate x
    dp_shard, MaxText fsdp x dp): gathers and reduce-scatters run in the dp_shard*cp shard group,
    and each unit's reduced shard is then all-reduced across the dp/dp_shard replicas (FSDP2's
    HSDP does both per unit, in the backward)."""
    from wanka.plan.exposure import _ct

    size, stride = lay.group("dp_shard_cp")
    replicas, replica_stride = lay.group("dp_replicate")
    e_size, e_stride = lay.group("expert_dp")
    w = 1 if lay.precision == "fp8" else 2
    gb = opts.grad_bytes or (2 if lay.precision == "fp16" else 4)

    def coll(kind, u, nbytes):
        return (_ct(cluster, kind, u.dense_params * nbytes, size, stride, opts.algorithm)
                + _ct(cluster, kind, u.expert_params * nbytes, e_size, e_stride, opts.algorithm))

    layer_runs, inside_d, inside_e = [], 0.0, 0.0
    for lt, count, is_moe, f, b in runs:
        units = layer_units(model, is_moe, f, b, lt.attn_fwd_s, lay.tp, lay.ep, opts.zero3_unit, lay.expert_tp)
        layer_runs.append((units, count))
        inside_d += count * sum(u.dense_params for u in units)
        inside_e += count * sum(u.expert_params for u in units)
    extra = Unit(0.0, 0.0, max(0.0, dense_params - inside_d), max(0.0, expert_params - inside_e))
    def reduce(u):
        t = coll("reduce_scatter", u, gb)
        if replicas > 1:  # the shard's gradients across the HSDP replicas
            t += _ct(cluster, "all_reduce", u.dense_params * gb / size, replicas, replica_stride, opts.algorithm)
        return t

    exposed, total = microbatch_exposed_s(layer_runs, extra, lay.recompute == "full",
                                          lambda u: coll("all_gather", u, w), reduce, opts.zero3_grad_overlap,
                                          opts.zero3_reuse_distance, opts.zero3_max_live_params or math.inf,
                                          keep_unsharded=opts.fsdp2_keep_unsharded)
    copies = 0.0
    if opts.fsdp2_copies:
        from wanka.plan import efficiency as E

        inside = inside_d + inside_e
        outside = extra.dense_params + extra.expert_params
        copies = fsdp2_copy_bytes(inside, outside, w, gb) / E.hbm_Bps(cluster.gpu)
    return (exposed if opts.dp_overlap else total) + copies, total + copies


def fsdp2_copy_bytes(block_params: float, root_params: float, weight_bytes: int, grad_bytes: int) -> float:
    """HBM bytes per micro-batch of FSDP2's per-parameter copies on the compute stream
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; _composable/fsdp in torch 2.5-2.6):
    foreach_all_gather_copy_out splits each gathered buffer into the parameters
    (split_with_sizes_copy, read + write) after every unshard -- blocks twice (forward, and the
    backward after reshard_after_forward; activation checkpointing inside the unit re-uses the
    backward's gather), the root module once (FSDP2 keeps the root unsharded after forward);
    foreach_reduce's copy-in casts each unsharded gradient (16-bit) into the reduce-dtype buffer
    (_chunk_cat) on the compute stream before the reduce-scatter stream waits for it (torch 2.13);
    the 2024 _composable/fsdp foreach_reduce_scatter ran it on the reduce-scatter stream and made
    the compute stream wait for its event (current_stream.wait_event(copy_in_event)): on the
    critical path either way."""
    gathers = 2 * block_params + root_params
    return gathers * 2 * weight_bytes + (block_params + root_params) * (2 + grad_bytes)
