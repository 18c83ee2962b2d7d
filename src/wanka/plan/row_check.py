"""One published run priced and compared with its measurement (`wanka plan validate`; docs/plan.md
"Validate"): the Check each row yields, the size check of the model as read, and what the error compares
(tokens/s per GPU, MFU, HFU, or a whole run's average). The row readers are in plan/published.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from wanka.errors import SpecError
from wanka.plan.published import framework_options, row_cluster, row_layout, row_model
from wanka.plan.row_measured import (counting_text, flops_convention, measured_mfu, measured_tokens_per_gpu,
                                     to_planner_flops)
from wanka.plan.row_text import row_year, section


@dataclass
class Check:
    id: str
    gpus: int | None = None
    layout: str = ""
    measured: float | None = None  # tokens/s per GPU
    predicted: float | None = None
    error: float | None = None  # predicted / measured - 1
    mfu_measured: float | None = None  # as the source counts it, % of the BF16 peak
    mfu_predicted: float | None = None
    hfu_measured: float | None = None  # % of the BF16 peak, recompute counted
    hfu_predicted: float | None = None
    memory_GiB: float | None = None
    fits: bool | None = None
    basis: str | None = None  # what the error compares: "tokens/s" (per GPU), else "MFU" or "HFU", or
    # "run-level" (a whole run's average: own median, not in the steady-state statistics)
    assumed: list[str] = field(default_factory=list)
    skipped: str | None = None
    mechanism: str | None = None  # uncertainty class (wanka.plan.uncertainty)
    group: str | None = None  # configuration: what leave-one-out leaves out together
    p10: float | None = None  # interval of the compared quantity (units of `measured`, or MFU/HFU %)
    p90: float | None = None
    covered: bool | None = None  # measured inside [p10, p90]
    family: str | None = None  # framework profile the row names (plan/frameworks.py family_of)
    # run-level rows: `predicted` = steady state x goodput (plan/run_level.py, reliability/goodput.py)
    predicted_steady_state: float | None = None
    goodput: float | None = None
    goodput_detail: dict | None = None
    # MoE runs whose layers block the host once per forward (plan/moe_host_sync.py): why, or None.
    # Not priced -- a user reads it as "the prediction may be optimistic where layers are thin"
    host_sync: str | None = None


def check_row(row: dict) -> Check:
    """Price one published run and compare; never raises for a row the planner cannot take."""
    from wanka.plan.estimate import estimate
    from wanka.plan.frameworks import family_of
    from wanka.plan.moe_host_sync import moe_host_sync_of_row
    p, hw = section(row, "parallelism"), section(row, "hardware")
    c = Check(id=str(row.get("id", "?")), gpus=hw.get("gpu_count") if isinstance(hw.get("gpu_count"), int) else None,
              family=family_of(p.get("framework"), p.get("zero_or_fsdp")))
    try:
        model, cluster = row_model(row, c.assumed), row_cluster(row, c.assumed)
        _check_size(row, model, c.assumed)
        lay, layout_assumed = row_layout(row)
        c.assumed += layout_assumed
        e_opts = framework_options(row, lay)
        e = estimate(model, cluster, lay, options=e_opts)
        c.layout, c.predicted = str(e.layout), e.tokens_per_s_per_gpu
        c.host_sync = moe_host_sync_of_row(row)
        c.mfu_predicted, c.memory_GiB, c.fits = 100 * e.mfu, e.memory_GB_per_gpu, e.fits
        _compare(row, c, e, model, cluster)
    except (SpecError, ValueError, TypeError, ZeroDivisionError) as exc:
        c.skipped = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return c
    if c.skipped:
        return c
    from wanka.plan.uncertainty import judge

    pred, meas = {"MFU": (c.mfu_predicted, c.mfu_measured), "HFU": (c.hfu_predicted, c.hfu_measured)}.get(
        c.basis, (c.predicted, c.measured))
    judge(c, model, cluster, e.layout, e_opts, pred, meas)
    return c


def _check_size(row: dict, model, assumed: list[str]) -> None:
    """List it when the model as read is not the size the row states (a field misread or assumed wrong)."""
    from wanka.workload.params import param_counts

    pc, a = param_counts(model), section(row, "architecture")
    for key, ours in (("total_params_B", pc.total / 1e9), ("active_params_B", pc.active / 1e9)):
        stated = a.get(key)
        if isinstance(stated, (int, float)) and stated > 0 and abs(ours / stated - 1) > 0.1:
            assumed.append(f"model as read has {ours:.1f}B parameters, the row states {key} {stated:g}")


def source_caveat(result: dict) -> str | None:
    """`result.source_caveat`: the source's own words where it flags the figure as not what the stack does
    (a regression it names as a known bug, to be fixed in the next release). Such a row is priced but not
    compared: its error would measure the bug, not the planner (docs/plan.md "Validate")."""
    v = result.get("source_caveat")
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise SpecError("result.source_caveat", "the source's words on why the figure is not representative", v)
    return " ".join(v.split())


def _compare(row: dict, c: Check, e, model, cluster) -> None:
    """What `c` compares with: a whole run's average (plan/run_level.py: steady state x the run's
    expected goodput), else tokens/s per GPU, else MFU, else HFU (both in the planner's FLOP count
    and peak, plan/row_measured.py)."""
    from wanka.plan.run_level import row_goodput, run_level_reason, run_level_tokens_per_gpu

    r = section(row, "result")
    if (caveat := source_caveat(r)) is not None:  # measured, but not the stack as it was meant to run
        c.measured, _ = measured_tokens_per_gpu(row, e.layout)
        c.skipped = f"the source flags this result: {caveat}"
        return
    convention = flops_convention(counting_text(row, r))
    if convention != "full":
        c.assumed.append(f"measured MFU/HFU converted from a {convention} FLOP count to 6N + 12 L h s")
    mfu, hfu = measured_mfu(row, cluster.gpu.peak("bf16"), c.assumed)
    c.mfu_measured = mfu and to_planner_flops(mfu, convention, model, model.seq_len)
    hfu = hfu and to_planner_flops(hfu, convention, model, model.seq_len)
    c.measured, _ = measured_tokens_per_gpu(row, e.layout)
    runlevel = run_level_reason(row)
    if runlevel:  # a whole run's average: steady state x the run's expected goodput (plan/run_level.py)
        c.measured = c.measured or run_level_tokens_per_gpu(row)
        if c.measured:
            g, why = row_goodput(model, cluster, row_year(row))
            c.predicted_steady_state, c.goodput, c.goodput_detail = c.predicted, g.goodput, g.as_dict()
            c.predicted = c.predicted_steady_state * g.goodput
            c.basis, c.error = "run-level", c.predicted / c.measured - 1
            c.assumed += [runlevel, f"goodput {g.goodput:.1%}"]
            c.goodput_detail["inputs"] = why
        else:
            c.skipped = "run-level row without result.training_tokens and GPU-hours (or days)"
    elif c.measured:
        c.error, c.basis = c.predicted / c.measured - 1, "tokens/s"
    elif c.mfu_measured:
        c.error, c.basis = c.mfu_predicted / c.mfu_measured - 1, "MFU"
    elif hfu:
        c.hfu_measured, c.hfu_predicted = hfu, 100 * e.hfu
        c.error, c.basis = c.hfu_predicted / c.hfu_measured - 1, "HFU"
    else:
        c.skipped = "no result.tokens_per_sec_per_gpu, iteration_time_s, mfu_pct, hfu_pct or tflops_per_gpu to compare with"
