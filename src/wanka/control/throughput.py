"""The planner's prediction of a job's tokens/s on the node it runs on, for the throughput rule.

`wanka control up --cluster SPEC` names the node's hardware as a cluster spec (a preset or a
YAML/JSON file, the planner's own format, docs/plan.md); at submit, `predict_tokens_per_s` prices
the job's model and layout on that spec with `wanka.plan.estimate` (the same call as `wanka plan
--layout`), with the spec's GPU count set to the job's ranks. Without `--cluster` there is no
prediction and the throughput rule stays silent for that job.
"""

from __future__ import annotations

from wanka.errors import SpecError


def load_node_cluster(source: str):
    """Validate the node's cluster spec at start-up (SpecError names the field)."""
    from wanka.cluster.presets import load_cluster

    return load_cluster(source)


def predict_tokens_per_s(source: str, spec) -> float | None:
    """Predicted tokens/s of `spec` (a checked JobSpec) on the cluster `source`; None when the planner
    cannot price it there (e.g. the ranks are no multiple of the spec's GPUs per node)."""
    from wanka.cluster.presets import load_cluster
    from wanka.layout import Layout
    from wanka.plan import estimate
    from wanka.workload.spec import load_model

    try:
        node = load_cluster(source)
        per_node = min(node.gpus_per_node, spec.nproc)
        domain = min(node.spec.scale_up.domain or per_node, per_node)
        cluster = load_cluster(source, gpus=spec.nproc, gpus_per_node=per_node,
                               scale_up={**node.spec.scale_up.model_dump(), "domain": domain})
        model = load_model(spec.model, **({"seq_len": spec.seq_len} if spec.seq_len else {}))
        layout = Layout.parse(spec.layout)
        return float(estimate(model, cluster, layout, seq_len=model.seq_len).tokens_per_s)
    except SpecError:
        return None
