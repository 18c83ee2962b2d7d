"""Where an MoE layer makes the host wait for the device (docs/plan.md "MoE, sixth pass").

Dropless MoE has data-dependent shapes: how many routed copies each expert (and each EP peer)
receives is known on the device after routing, but the host needs it to size the all-to-all
splits, allocate the permuted buffer and pass the per-expert split sizes to the grouped GEMM. Each
path of Megatron-Core copies it to the host and blocks on that copy once per MoE layer forward
(the backward reuses the host values the forward saved, so it does not block):

  * all-to-all dispatcher (MoEAlltoAllTokenDispatcher): core_r0.11.0 token_dispatcher.py calls
    `torch.cuda.current_stream().synchronize()` before the EP all-to-all; core_v0.14.0rc7 and later
    copy tokens_per_expert / input_splits / output_splits on a side stream and block at
    `cuda_sync_point` (`_maybe_dtoh_and_synchronize`: `self.d2h_event.synchronize()`), which
    preprocess sets to "before_ep_alltoall" when ep x tp > 1, "before_finish" otherwise, and earlier
    ("before_permutation_1") with a capacity factor or router padding for quantisation;
  * flex dispatcher, DeepEP backend (_DeepepManager, core_v0.14.0rc7 53cad713 .. core_v0.19.0 5be96267):
    `num_out_tokens=self.tokens_per_expert.sum().item()` before the permutation;
  * flex dispatcher, HybridEP backend (_HybridEPManager, core_v0.16.0..): `num_permuted_tokens`
    stays None in dropless mode, "None means no up-bound, will cause a CPU sync" (the code's own
    comment) inside the HybridEP dispatch; core_v0.18.0 (ba7b5ebc) adds `moe_expert_rank_capacity_factor`, a
    static per-rank budget that removes it;
  * all-gather dispatcher (MoEAllGatherTokenDispatcher, and MindSpeed's patch of it):
    `tokens_per_expert = self.local_map.sum(dim=0).long().cpu()`.

What removes it: padding every expert to capacity (--moe-pad-expert-input-to-capacity with a
capacity factor: `_maybe_dtoh_and_synchronize` returns at once when drop_and_pad, and the counts
are CPU constants -- every dgxc Grok-1/DeepSeek-V3 row and every MoE Parallel Folding row ran so).
A capacity factor without padding keeps the sync (it moves earlier). CUDA graphs over the
`moe_router` / `moe_preprocess` scopes do not remove it (core token_dispatcher.py only moves the
device-to-host copy point to "before_ep_alltoall" when they are captured); a whole-iteration graph
(`cuda_graph_impl=full_iteration`) cannot hold a host synchronisation at all (a stream cannot be
synchronised while it is being captured, CUDA Programming Guide "CUDA Graphs", prohibited and
unhandled operations), so a run that captured the iteration was sync-free.

This module only says whether a run's MoE layers carry the sync, from the switches its row states.
What the sync costs -- max(host launch time of the work after it, device time) per layer instead of
the device time -- is not priced: no published host time per launched operator of eager
PyTorch + Megatron-Core training on the rows' hosts was found to source it (docs/plan.md "MoE, sixth
pass"; the per-module host times that were found, and why they do not price it: "seventh pass").
"""

from __future__ import annotations

# The reason each dispatcher's dropless path blocks the host, with its source (above).
SYNC_REASON = {
    "alltoall": "all-to-all dispatcher: tokens per expert copied to the host, "
                "d2h_event.synchronize() at cuda_sync_point (token_dispatcher.py)",
    "deepep": "flex/DeepEP: tokens_per_expert.sum().item() before the permutation (token_dispatcher.py)",
    "hybridep": "flex/HybridEP: num_permuted_tokens None -> host sync in the dispatch (token_dispatcher.py)",
    "allgather": "all-gather dispatcher: local_map.sum(dim=0).long().cpu() (token_dispatcher.py)",
}


def dispatcher_backend(text: str | None) -> str | None:
    """The dispatcher a row names ('alltoall', 'flex (deepep)', 'flex (hybridep)', 'allgather'),
    as a key of SYNC_REASON; None when the row names none."""
    t = (text or "").lower()
    for key in ("hybridep", "deepep", "allgather", "alltoall"):
        if key in t:
            return key
    return None


def moe_host_sync(experts: int, dispatcher: str | None, capacity_factor: float | None,
                  padded: bool = True, full_iteration_graph: bool = False,
                  expert_rank_capacity_factor: float | None = None) -> str | None:
    """Why one MoE layer forward blocks the host on the device, or None when it does not.
    `dispatcher`: a SYNC_REASON key, None for the all-to-all dispatcher NeMo's recipes set (the
    planner's default, docs/plan.md Estimator/MoE). `capacity_factor` with `padded` (the planner's
    reading of a capacity factor: buffers padded to capacity, moe_cost.moe_imbalance): no sync.
    `full_iteration_graph`: the iteration was captured as one CUDA graph, so it held no sync.
    `expert_rank_capacity_factor`: HybridEP's static budget (core_v0.18.0), no sync."""
    if experts <= 1 or full_iteration_graph:
        return None
    if capacity_factor is not None and padded:
        return None
    backend = dispatcher or "alltoall"
    if backend == "hybridep" and expert_rank_capacity_factor is not None:
        return None
    return SYNC_REASON[backend]


def moe_host_sync_of_row(row: dict) -> str | None:
    """moe_host_sync from a published row: its experts, `parallelism.moe_token_dispatcher`,
    `parallelism.moe_capacity_factor` (read as padded, as the planner prices it) and whether its
    notes name a whole-iteration CUDA graph (`cuda_graph_impl=full_iteration`)."""
    arch = row.get("architecture") or {}
    p = row.get("parallelism") or {}
    notes = row.get("notes") or ""
    notes = " ".join(notes) if isinstance(notes, list) else str(notes)
    return moe_host_sync(int(arch.get("num_experts") or 0), dispatcher_backend(p.get("moe_token_dispatcher")),
                         p.get("moe_capacity_factor"),
                         full_iteration_graph="cuda_graph_impl=full_iteration" in notes)


def moe_host_sync_of_options(model, opts) -> str | None:
    """moe_host_sync for a `wanka plan` run: the model's experts and the Options' dispatcher
    (flex backend, else all-to-all / all-gather) and capacity factor (read as padded, as priced)."""
    if model.moe is None:
        return None
    return moe_host_sync(model.moe.experts, opts.moe_flex_backend or opts.moe_dispatcher, opts.moe_capacity_factor)
