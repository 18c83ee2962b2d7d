"""What an MoE layer costs beyond its GEMMs: routing imbalance and the tensor-parallel traffic of
the routed tokens (docs/plan.md "MoE").

Routing imbalance. The all-to-all combine waits for the slowest EP rank, so the expert GEMMs and
the dispatch/combine volume of a layer are set by the most-loaded rank, not the mean. Even a
perfectly balanced router (every expert equally likely; aux-loss-free balancing, DeepSeek-V3
s.2.1.2, drives the expected loads to equal) leaves the multinomial spread of one micro-batch: N
routed copies over ep ranks (E/ep experts each) put Binomial(N, 1/ep) on a rank, mean N/ep, standard
deviation sqrt(N (1/ep)(1 - 1/ep)), and the largest of ep such counts exceeds the mean by the
expected maximum of ep standard normals, Phi^-1((ep - 0.375) / (ep + 0.25)) standard deviations
(Blom's approximation of normal order statistics, Blom 1958; tests check it against a sampled
multinomial). That floor is small for training micro-batches (about 2% for 32k routed
copies on 8 ranks) and large for small ones. A trained router is less balanced than that floor;
published figures (e.g. the balancedness = mean/max token load per EP rank that vLLM exports,
vllm/distributed/eplb/eplb_state.py, for deployments balanced by deepseek-ai/EPLB) go in
`Options.moe_imbalance` (max/mean = 1/balancedness), which replaces the floor.

Capacity factor (token-dropping MoE: Switch Transformer, Fedus et al. 2021, s.2.2; GShard): an
expert takes at most capacity_factor x (routed tokens / experts); the dispatch buffers are padded
to that capacity (DeepSpeed-MoE sharded_moe.py: dispatch to [experts, capacity, hidden]; Megatron-Core
--moe-pad-expert-input-to-capacity), so the experts' GEMMs and the all-to-all move capacity-sized
buffers: load factor = capacity_factor, whatever the routing (`Options.moe_capacity_factor`).

Tensor-parallel traffic of the routed tokens (Megatron-Core transformer/moe/token_dispatcher.py,
MoEAlltoAllTokenDispatcher). A dense MLP under sequence parallelism all-gathers its input and
reduce-scatters its output over the TP group: one token's h values each way. An MoE layer does
instead:
  * experts split over the TP ranks (etp = tp > 1): after the EP all-to-all the routed tokens are
    all-gathered over the (expert-)TP group and reduce-scattered after the experts -- top_k copies
    of every token, top_k times the dense MLP's bytes (1 < etp < tp: priced on the TP group, an
    approximation);
  * experts not TP-split (etp = 1): the sequence-parallel tokens go straight into the all-to-all
    over the ep*etp ranks: no TP collective for the routed experts;
  * shared experts are TP-split like a dense MLP: one dense MLP's all-gather + reduce-scatter.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def balanced_router_imbalance(routed_copies: float, ep: int) -> float:
    """Expected max/mean routed copies per EP rank for a router that picks every expert with equal
    probability (the multinomial floor above). `routed_copies`: the EP group's routed (token,
    expert) pairs of one micro-batch."""
    if ep <= 1 or routed_copies <= 0:
        return 1.0
    p = 1.0 / ep
    mean = routed_copies * p
    sd = math.sqrt(routed_copies * p * (1 - p))
    z_max = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))  # E[max of ep standard normals] (Blom)
    return 1.0 + z_max * sd / mean


def moe_imbalance(lay, tokens_per_rank: float, top_k: int, override: float | None,
                  capacity_factor: float | None = None) -> float:
    """max/mean routed load per EP rank of one micro-batch: with a capacity factor the padded
    buffers (capacity_factor x the mean, Switch Transformer s.2.2); else `override`
    (Options.moe_imbalance); else the balanced-router floor for the EP group's tokens
    (`tokens_per_rank` tokens on each rank)."""
    if capacity_factor is not None:
        return capacity_factor
    if override is not None:
        return override
    return balanced_router_imbalance(tokens_per_rank * top_k * lay.ep, lay.ep)


def moe_mlp_tp_multiplier(lay, top_k: int, shared_experts: int) -> float:
    """TP traffic of an MoE layer's MLP part, in units of a dense MLP's (all-gather + reduce-scatter
    of the layer's tokens): top_k with TP-split experts, 0 without, +1 for shared experts."""
    if lay.tp <= 1:
        return 0.0
    routed = float(top_k) if lay.expert_tp > 1 else 0.0
    return routed + (1.0 if shared_experts else 0.0)
