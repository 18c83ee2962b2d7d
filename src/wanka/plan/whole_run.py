"""A whole training run: days, GPU-hours, energy and cost for a token budget (docs/plan.md).

Energy: the job's GPUs at GPU_UTILISATION_POWER of TDP, plus their share of host and switch
power (cluster.power_MW: hosts 575 W per GPU, switches 1.5 kW each by default), times the
cluster's PUE. 0.8 of TDP is an assumption: Llama 3 training swings by tens of MW across a 24k-GPU
cluster (arXiv:2407.21783 section 3.3.4) and large-model training runs H100s near but below TDP.
Cost = energy x the cluster's electricity price (no GPU rental or capital cost).
Days are wall-clock at the estimated steady-state speed (no failures, restarts or evaluation;
the reliability layer accounts for those).
"""

from __future__ import annotations

from wanka.cluster import Cluster
from wanka.plan.estimate import Estimate

GPU_UTILISATION_POWER = 0.8


def whole_run(est: Estimate, tokens: float, cluster: Cluster | None = None) -> dict:
    c = cluster or est.cluster_ref
    if c is None:
        from wanka.cluster import load_cluster

        c = load_cluster(est.cluster, gpus=est.gpus)
    seconds = tokens / est.tokens_per_s
    hours = seconds / 3600
    power = c.power_MW()
    if power["it"] is None:
        energy = None
        cost = None
    else:
        gpu_MW = power["gpu"] * GPU_UTILISATION_POWER
        it_MW = gpu_MW + (power["it"] - power["gpu"])
        energy = it_MW * c.spec.power.pue * hours  # MWh
        cost = energy * 1000 * c.spec.power.electricity_usd_per_kWh
    return {"tokens": tokens, "days": hours / 24, "gpu_hours": hours * est.gpus, "energy_MWh": energy,
            "cost_usd": cost}
