"""Hierarchical MoE dispatch (DeepEP / HybridEP) and node-limited routing (docs/plan.md "MoE,
hierarchical dispatch").

Megatron-Core's flex dispatcher (--moe-token-dispatcher-type flex, --moe-flex-dispatcher-backend
deepep|hybridep) hands the routed tokens to DeepEP's (or NVIDIA's HybridEP's) normal kernels. Their
internode path (deepseek-ai/DeepEP README@567632dd "Normal kernels with NVLink and RDMA forwarding";
DeepSeek-V3 report, arXiv 2412.19437 s.3.2.2) sends a token *once* to every destination node over
RDMA, to the GPU of the same local index there, which forwards it over NVLink to the GPUs of that
node holding its experts. So one MoE layer's dispatch moves, per token:
  * over the network: (distinct remote nodes it is routed to) x hidden, not top_k x hidden;
  * over NVLink: (distinct GPUs it is routed to) x hidden, each forwarded once.
The two legs are pipelined (the forwarding warps run while RDMA chunks arrive), so the dispatch
takes the longer of the two. The combine runs the same paths backwards (same bytes).

Node-limited routing bounds the first count: DeepSeek-V3 (s.2.1.2 "Node-Limited Routing") splits
the experts into G groups and lets each token use the experts of at most M groups (HF config n_group
8, topk_group 4; Megatron-Core --moe-router-num-groups / --moe-router-group-topk,
transformer/moe/moe_utils.py group_limited_topk: the scores reshaped to [tokens, G, E/G], the M best
groups kept, the top_k experts taken among them). Groups and EP ranks both hold contiguous experts.

Expected distinct units per token (units: nodes, or single EP ranks), closed form. Assumption: the
router's choices are uniform -- the M groups uniformly among G, the top_k experts uniformly among
the selected groups' M E/G experts. That is what the benchmark rows ran: NeMo's performance recipes
set moe_router_force_load_balancing (random logits, Megatron-Core router.py apply_random_logits;
Megatron-Bridge scripts/performance/run_script.py@bf71eba0 for DeepEP; the tables' footnote "MoE
benchmarks force-balance tokens across experts"). P(a unit is not hit):
  * c = G/n groups per unit (G a multiple of n): a of the unit's c groups are selected with the
    hypergeometric probability C(c,a) C(G-c,M-a) / C(G,M); then none of the k experts lands in those
    a groups' a E/G experts: C((M-a) E/G, k) / C(M E/G, k);
  * a group spans n/G units (n a multiple of G): the unit's group is not selected (1 - M/G), or it is
    and none of the k lands on the unit's E/n experts: (M/G) C(M E/G - E/n, k) / C(M E/G, k).
Without node limiting G = M = 1 (the second case): 1 - C(E - E/n, k) / C(E, k).
Expected distinct units = n (1 - P(not hit)); a token's own unit is one of them with probability
1/n by symmetry, so the remote ones are that times (n - 1)/n.
"""

from __future__ import annotations

from math import comb

from wanka.plan.exposure import _ct
from wanka.plan.flex_intranode import flex_bytes, intra_domain_flex_comm_s

FLEX_BACKENDS = ("deepep", "hybridep")


def _miss(pool: int, avoid: int, k: int) -> float:
    """P(k experts drawn without replacement from `pool` avoid `avoid` given ones)."""
    if avoid <= 0:
        return 1.0
    if pool - avoid < k:
        return 0.0
    return comb(pool - avoid, k) / comb(pool, k)


def expected_distinct_units(top_k: int, experts: int, units: int, groups: int = 1, group_topk: int = 1) -> float:
    """Expected number of distinct units (nodes, or EP ranks) one token's top_k experts sit on, the
    experts split contiguously over `units`, with node-limited routing over `groups` groups of which
    `group_topk` are kept (module docstring). Groups that neither divide nor are divided by the units
    are priced without the limit (an approximation, said in docs/plan.md)."""
    if units <= 1 or top_k <= 0:
        return 1.0 if units >= 1 and top_k > 0 else 0.0
    if experts % units:
        raise ValueError(f"{experts} experts do not split over {units} units")
    g, m = groups, group_topk
    if not (1 <= m <= g and experts % g == 0 and (g % units == 0 or units % g == 0)):
        g = m = 1
    per_group = experts // g
    pool = m * per_group  # the experts of the selected groups
    if g % units == 0:
        c = g // units
        p_not = sum(comb(c, a) * comb(g - c, m - a) / comb(g, m) * _miss(pool, a * per_group, top_k)
                    for a in range(0, min(c, m) + 1) if m - a <= g - c)
    else:
        p_not = (1 - m / g) + (m / g) * _miss(pool, experts // units, top_k)
    return units * (1.0 - p_not)


def flex_dispatch_of_row(parallelism: dict) -> dict:
    """Options fields for a row whose dispatcher is flex (`parallelism.moe_token_dispatcher`
    'flex (deepep)' / 'flex (hybridep)') and for its router's node limit
    (`parallelism.moe_router_num_groups` / `moe_router_group_topk`); nothing otherwise."""
    from wanka.plan.moe_host_sync import dispatcher_backend

    kw = {}
    text = str(parallelism.get("moe_token_dispatcher") or "")
    backend = dispatcher_backend(text)  # the one reader of the dispatcher's name
    if "flex" in text.lower() and backend in FLEX_BACKENDS:
        kw["moe_flex_backend"] = backend
    g, m = parallelism.get("moe_router_num_groups"), parallelism.get("moe_router_group_topk")
    if isinstance(g, int) and isinstance(m, int) and 1 <= m <= g:
        kw["moe_router_groups"] = (g, m)
    return kw


def hierarchical_ep_layer_comm_s(cluster, lay, tokens: float, hidden: int, elem: float, moe, imbalance: float,
                                 router_groups: tuple[int, int] | None, algorithm: str) -> float | None:
    """Dispatch + combine of one MoE layer forward (backward the same) through DeepEP/HybridEP's
    hierarchical kernels, or None when the EP group stays in one scale-up domain (then the flat
    all-to-all's pricing holds: every peer is an NVLink peer). `tokens`: the tokens one EP rank
    dispatches per micro-batch; `imbalance`: the most-loaded rank's factor, as for the flat one.
    Each leg is priced as an all-to-all on its own group by wanka.comm, with the bytes that leg
    carries: the network leg as the EP group's all-to-all whose cross-node share equals the remote
    nodes' bytes, the NVLink leg as the node's all-to-all of the forwarded copies."""
    size, stride = lay.group("ep")
    from wanka.comm import group_for_stride

    grp = group_for_stride(cluster, size, stride)
    per_node = grp.gpus_per_unit()[0]  # EP ranks inside one scale-up domain
    nodes = size // per_node
    if nodes <= 1:
        return None
    g, m = router_groups or (1, 1)
    # the network leg is charged every destination node, the token's own included: DeepEP counts its
    # RDMA bytes so (tests/test_internode.py@567632dd num_rdma_token_sent: distinct nodes per token) and
    # measures 43-58 GB/s of them on ~50 GB/s NICs (README "Normal kernels"), i.e. the counted bytes
    # move at about the NIC's rate (own-node sends go through the same RDMA buffers and channels)
    rdma_nodes = expected_distinct_units(moe.top_k, moe.experts, nodes, g, m)
    ranks_hit = expected_distinct_units(moe.top_k, moe.experts, size, g, m)
    token_bytes = tokens * hidden * elem * imbalance
    # a flat all-to-all of X bytes per rank sends X (size - per_node) / size across nodes
    net_equiv = token_bytes * rdma_nodes * size / (size - per_node)
    net_s = _ct(cluster, "all_to_all", net_equiv, size, stride, algorithm)
    nvl_s = 0.0
    if per_node > 1:  # every distinct GPU a token reaches in a node gets one copy over NVLink
        fwd = token_bytes * ranks_hit  # copies per rank, spread over the node's peers
        nvl_s = _ct(cluster, "all_to_all", fwd, per_node, stride, algorithm)
    return 2 * max(net_s, nvl_s)


def flex_ep_layer_comm_s(cluster, lay, tokens: float, hidden: int, elem: float, moe, imbalance: float,
                         router_groups: tuple[int, int] | None, algorithm: str, backend: str,
                         sms: int) -> float | None:
    """Dispatch + combine of one MoE layer forward through the flex dispatcher's `backend`: its
    two-leg path when the EP group spans scale-up domains (hierarchical_ep_layer_comm_s), its NVLink
    kernels at their published rates inside one (plan/flex_intranode.py); None where neither applies
    (then the flat all-to-all's pricing holds).

    Inside one domain on a part without published rates (Hopper, B300/GB300, non-NVIDIA) the kernels'
    bytes still are what they are: one copy per token and destination rank, dispatched in BF16 or FP8
    with its scales and combined in BF16 (flex_intranode.flex_bytes, the hierarchical path's NVLink leg), so
    those bytes are priced at the flat all-to-all's rate over the domain's links -- not top_k copies.
    Checked against Megatron-LM's H100 MoE-layer baselines (docs/plan.md "MoE layer, published
    H100 baselines")."""
    hier = hierarchical_ep_layer_comm_s(cluster, lay, tokens, hidden, elem, moe, imbalance, router_groups, algorithm)
    if hier is not None:
        return hier
    g, m = router_groups or (1, 1)
    distinct = expected_distinct_units(moe.top_k, moe.experts, lay.ep, g, m)
    rated = intra_domain_flex_comm_s(cluster.gpu.name, backend, lay.ep, sms, tokens, hidden, elem, distinct, imbalance)
    if rated is not None or lay.ep <= 1:
        return rated
    size, stride = lay.group("ep")
    return sum(_ct(cluster, "all_to_all", b, size, stride, algorithm)
               for b in flex_bytes(tokens, hidden, elem, distinct, imbalance))
