"""Megatron-DeepSpeed runs (plan/published_runs/megatron_deepspeed.json) and DeepSpeed's pipeline
engine mechanisms (plan/frameworks.py 'megatron-deepspeed')."""

import dataclasses

from wanka.plan.estimate import estimate
from wanka.plan.published import check_row, framework_options, load_rows, row_cluster, row_layout, row_model


def test_rows_are_priced_with_the_pipeline_engine_schedule():
    rows = load_rows("megatron_deepspeed")
    assert len(rows) == 4
    for r in rows:
        c = check_row(r)
        assert c.skipped is None and c.basis == "tokens/s"
        opts = framework_options(r, row_layout(r)[0])
        assert (opts.grad_sync, opts.dp_overlap, opts.pp_scatter_gather) == ("per_step", False, False)


def test_whole_activations_between_stages_cost_tp_times_the_bytes():
    r = next(r for r in load_rows("megatron_deepspeed") if r["id"].startswith("bloom"))
    m, c, (lay, _) = row_model(r), row_cluster(r), row_layout(r)
    ds = framework_options(r, lay)
    whole = estimate(m, c, lay, options=ds)
    split = estimate(m, c, lay, options=dataclasses.replace(ds, pp_scatter_gather=True))
    assert lay.tp == 4 and whole.breakdown["pp_comm"] > 2 * split.breakdown["pp_comm"]
    assert whole.tokens_per_s_per_gpu < split.tokens_per_s_per_gpu
