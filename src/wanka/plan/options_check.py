"""Checks of the planner's Options (wanka.plan.exposure.Options), run on construction so that
Options built from Python fail as the CLI does: SpecError('options.<field>', expected, got).

Each field has one rule (tests/plan/test_plan_construction.py checks that every field has one).
"""

from __future__ import annotations

import math
from dataclasses import fields

from wanka.comm import ALGORITHMS
from wanka.errors import SpecError
from wanka.plan.zero3 import UNITS as ZERO3_UNITS
from wanka.workload.activations import RECOMPUTE_MODULES


def _fraction(upper_open: bool):
    expected = "a number in [0, 1)" if upper_open else "a number in [0, 1]"

    def ok(v) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return 0.0 <= v < 1.0 if upper_open else 0.0 <= v <= 1.0
    return ok, expected


def _number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _choice(*names: str):
    return (lambda v: isinstance(v, str) and v in names), " | ".join(names)


_FLAG = (lambda v: isinstance(v, bool)), "true or false"
RULES = {
    "attention": _choice("flash", "flash2", "unfused"),
    "tp_overlap": _fraction(False),
    "dp_overlap": _FLAG,
    "ep_overlap": _fraction(False),
    "algorithm": _choice(*ALGORITHMS),
    "grad_bytes": ((lambda v: v is None or (type(v) is int and v in (2, 4))), "2 or 4 (bytes per gradient element) or None"),
    "recompute_modules": ((lambda v: isinstance(v, tuple) and len(v) > 0 and all(x in RECOMPUTE_MODULES for x in v)),
                          f"a non-empty tuple of names among {', '.join(RECOMPUTE_MODULES)}"),
    "pipeline": _choice("1f1b", "dualpipe"),
    "comm_sm_fraction": _fraction(True),
    "fp8_activation_cache": _FLAG,
    "zero3_unit": _choice(*ZERO3_UNITS),
    "zero3_grad_overlap": _FLAG,
    "zero3_reuse_distance": ((lambda v: _number(v) and v >= 0.0), "a number of parameters >= 0"),
    "zero3_max_live_params": ((lambda v: v is None or (_number(v) and v > 0.0)), "a number of parameters > 0 or None"),
    "grad_sync": _choice("auto", "per_step"),
    "param_gather_overlap": ((lambda v: v is None or isinstance(v, bool)), "true, false or None (the framework's default)"),
    "moe_imbalance": ((lambda v: v is None or (_number(v) and v >= 1.0)), "max/mean routed load per EP rank, >= 1, or None"),
    "moe_capacity_factor": ((lambda v: v is None or (_number(v) and v > 0.0)), "a positive factor (1.0-2.0 typical) or None"),
    "moe_dispatch_bytes": ((lambda v: v is None or (type(v) is int and v in (1, 2, 4))), "1, 2 or 4 bytes per element, or None"),
    "moe_dispatcher": _choice("alltoall", "allgather"),
    "moe_flex_backend": ((lambda v: v is None or v in ("deepep", "hybridep")), "deepep, hybridep or None"),
    "moe_router_groups": ((lambda v: v is None or (isinstance(v, tuple) and len(v) == 2 and all(type(x) is int for x in v)
                                                   and 1 <= v[1] <= v[0])), "(groups, group_topk) with 1 <= group_topk <= groups, or None"),
    "moe_grouped_gemm": _FLAG,
    "moe_shared_expert_overlap": _FLAG,
    "moe_fused_expert_mlp": _FLAG,
    "moe_a2a_overlap": _FLAG,
    "moe_delay_wgrad": _FLAG,
    "moe_dispatcher_sms": ((lambda v: v is None or (type(v) is int and 0 <= v <= 1024)), "a whole number of SMs, 0-1024, or None"),
    "pp_layout": ((lambda v: v is None or _pp_layout_parses(v)), "a Megatron-Core layout of E, t, m, L, |, (...)*n, or None"),
    "mtp_layers": ((lambda v: type(v) is int and v >= 0), "a whole number of MTP modules >= 0"),
    "tp_overlap_gemm_bound": _FLAG,
    "pp_scatter_gather": _FLAG,
    "eager": _FLAG,
    "pp_blocking_p2p": _FLAG,
    "fp8_scaling": _choice("fused", "torchao-tensorwise"),
    "fp8_params": _FLAG,
    "dp_comm_ctas": ((lambda v: type(v) is int and 0 <= v <= 1024), "a whole number of CTAs, 0-1024 (0: not modelled)"),
    "pp_p2p_overlap": _FLAG,
    "dp_bucket_params": ((lambda v: v is None or (_number(v) and v >= 1)), "parameters per DP bucket (>= 1) or None"),
    "dp_sync_per_chunk": _FLAG,
    "align_param_gather": _FLAG,
    "bf16_optimizer": _FLAG,
    "layer_microbatch_overhead_s": ((lambda v: _number(v) and 0.0 <= v < 1.0), "seconds per layer per micro-batch, in [0, 1)"),
    "cp_rotate": _choice("ring", "allgather", "allgather-exposed"),
    "gqa_repeat_kv": _FLAG,
    "fsdp2_copies": _FLAG,
    "fsdp2_keep_unsharded": _FLAG,
    "adam_foreach": _FLAG,
    "eager_fp32_loss": _FLAG,
    "megatron_unfused_ce": _FLAG,
    "bf16_head": _FLAG,
    "complex_rope": _FLAG,
    "profile": ((lambda v: v is None or v in _profile_names()), "a framework profile name (wanka plan --framework) or None"),
}


def _pp_layout_parses(v) -> bool:
    from wanka.plan.pp_layout import virtual_stages

    if not isinstance(v, str):
        return False
    try:
        virtual_stages(v)
    except SpecError:
        return False
    return True


def _profile_names() -> tuple[str, ...]:
    from wanka.plan.frameworks import PROFILES  # frameworks imports Options: late import

    return tuple(PROFILES)


def check_options(opts) -> None:
    for f in fields(opts):
        rule = RULES.get(f.name)
        value = getattr(opts, f.name)
        if rule is not None and not rule[0](value):
            raise SpecError(f"options.{f.name}", rule[1], value)
    # Megatron-Core TransformerConfig.__post_init__ (@d98e8a64): delay_wgrad_compute needs the overlap,
    # and the overlap replaces --moe-shared-expert-overlap
    if opts.moe_delay_wgrad and not opts.moe_a2a_overlap:
        raise SpecError("options.moe_delay_wgrad", "false unless moe_a2a_overlap is true", True)
    if opts.moe_a2a_overlap and opts.moe_shared_expert_overlap:
        raise SpecError("options.moe_shared_expert_overlap", "false when moe_a2a_overlap is true", True)
