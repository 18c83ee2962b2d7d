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
        # DeepSpeed's pipeline engine partitions stage outputs over the TP ranks (is_pipe_partitioned)
        assert (opts.grad_sync, opts.dp_overlap, opts.pp_scatter_gather) == ("per_step", False, True)


def test_partitioned_sends_cost_a_tp_th_of_whole_activations():
    """DeepSpeed's engine sends 1/tp of each stage output per rank (PartitionedTensor); sending the
    whole tensor from every TP rank (pp_scatter_gather=False) costs more than twice as much at tp=4."""
    r = next(r for r in load_rows("megatron_deepspeed") if r["id"].startswith("bloom"))
    m, c, (lay, _) = row_model(r), row_cluster(r), row_layout(r)
    ds = framework_options(r, lay)
    split = estimate(m, c, lay, options=ds)
    whole = estimate(m, c, lay, options=dataclasses.replace(ds, pp_scatter_gather=False))
    assert lay.tp == 4 and whole.breakdown["pp_comm"] > 2 * split.breakdown["pp_comm"]
    assert whole.tokens_per_s_per_gpu < split.tokens_per_s_per_gpu


def test_mtnlg_runs_on_selenes_80gb_a100s_and_fits():
    """Microsoft Research blog (2021-10-11): each of Selene's DGX A100 servers has eight A100 80GB GPUs
    (the llm-analysis relay said 40GB); at TP 8 x PP 35 without ZeRO the model then fits."""
    for r in load_rows("megatron_deepspeed"):
        if r["id"].startswith("mtnlg"):
            assert row_cluster(r).gpu.name == "a100-80gb"
            c = check_row(r)
            assert c.fits and c.memory_GiB < 80
