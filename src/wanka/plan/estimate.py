"""Step time, throughput, MFU/HFU and memory of one layout (docs/plan.md "Estimator").

Pipeline schedule (Narayanan et al. SC'21 section 2.2): with m micro-batches, pp stages and vpp
model chunks per stage, a step takes (m + (pp-1)/vpp) * (t_f + t_b) where t_f, t_b are the forward
and backward times of one micro-batch on the slowest stage (including its exposed TP/CP/EP
communication and pipeline transfers); the bubble is the (pp-1)/vpp * (t_f + t_b) part (DualPipe:
m * (t_f + t_b) + (pp/2 - 1)(F&B + B - 3W), DeepSeek-V3 Table 2; see docs/plan.md). Then the
exposed DP communication and the optimizer step (memory-bound Adam over the local shard: ~30 bytes
per parameter -- fp32 master, m, v read and written, fp32 gradient read, 16-bit weight written).
MFU = model_flops_per_token * tokens / (step * GPUs * BF16 dense peak); HFU counts executed FLOPs
(recompute included) the same way. Both use the BF16 peak whatever the precision (docs/plan.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from wanka.cluster import Cluster
from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan import bf16_optimizer as ds_bf16
from wanka.plan import efficiency as E
from wanka.plan.a2a_overlap import (dispatcher_sm_share, dispatcher_sms, overlap_refusal, overlapped_ep_s,
                                    unpaired_share)
from wanka.plan.compute import head_time, layer_time
from wanka.plan.dp_schedule import exposed_dp_s, overlap_sm_cost_s
from wanka.plan.interleaved import chunk_p2p_exposed_s, fill_flush_p2p_s
from wanka.plan.hier_dispatch import flex_ep_layer_comm_s
from wanka.plan.exposure import (Options, cp_layer_exposed_s, dp_comm, ep_layer_comm_s, pp_p2p_s, tp_exposed_gemm_bound,
                                 tp_layer_comm_s)
from wanka.plan.uncertainty import mechanism_class
from wanka.plan.moe_cost import (allgather_dispatch_comm_s, moe_imbalance, moe_layer_tp_comm_s,
                                  shared_expert_overlap_ep_s)
from wanka.plan.pp_layout import stage_pieces
from wanka.plan.memory import _stage_params, distinct_stages, fits, memory_per_gpu, rank_stages
from wanka.plan.zero3 import zero3_microbatch_s
from wanka.workload.flops import model_flops_per_token
from wanka.workload.spec import ModelSpec

ADAM_BYTES_PER_PARAM = 30.0
# torch.optim AdamW with foreach=True (_multi_tensor_adam, fp32 state): weight decay mul 4+4,
# exp_avg lerp 8+4, exp_avg_sq mul 4+4 and addcmul 8+4, sqrt 4+4, div 4+4, add eps 4+4, param
# addcdiv 12+4 = 80 bytes per parameter, one pass per op (Options.adam_foreach)
ADAM_FOREACH_BYTES_PER_PARAM = 80.0


@dataclass
class Estimate:
    model: str
    cluster: str
    gpus: int
    layout: Layout
    seq_len: int
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    hfu: float
    tflops_per_gpu: float
    memory_GB_per_gpu: float
    fits: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    cluster_ref: Cluster | None = field(default=None, repr=False, compare=False)  # for whole_run
    mechanism: str = "dense"  # uncertainty class (wanka.plan.uncertainty.mechanism_class)

    def uncertainty(self) -> dict | None:
        """p10/p90 of tokens/s per GPU and step time from the validation residuals of this
        prediction's mechanism class (wanka.plan.uncertainty); None without a residual table."""
        from wanka.plan.uncertainty import interval

        iv = interval(self.mechanism)
        if iv is None:
            return None
        return {"class": iv.mechanism, "residual_rows": iv.rows,
                "tokens_per_s_per_gpu": iv.rate(self.tokens_per_s_per_gpu), "step_time_s": iv.duration(self.step_time_s)}

    def to_dict(self) -> dict:
        return {"model": self.model, "cluster": self.cluster, "gpus": self.gpus, "layout": str(self.layout),
                "seq_len": self.seq_len, "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
                "tflops_per_gpu": self.tflops_per_gpu, "memory_GB_per_gpu": self.memory_GB_per_gpu,
                "fits": self.fits, "breakdown": dict(self.breakdown), "memory": dict(self.memory),
                "uncertainty": self.uncertainty()}


def estimate(model: ModelSpec, cluster: Cluster, layout: Layout, *, seq_len: int | None = None,
             options: Options | None = None) -> Estimate:
    """Price `layout` (resolved here against the cluster's GPU count) of `model` on `cluster`."""
    opts = options or Options()
    lay = layout.resolve(cluster.gpus, model)
    seq = seq_len or model.seq_len
    if seq % lay.cp:
        raise SpecError("layout.cp", f"a divisor of the sequence length ({seq})", lay.cp)
    dualpipe = opts.pipeline == "dualpipe"
    if dualpipe and (lay.pp < 2 or lay.pp % 2 or lay.vpp > 1):
        raise SpecError("options.pipeline", "dualpipe with an even pp >= 2 and vpp 1", f"pp={lay.pp}, vpp={lay.vpp}")
    if opts.moe_a2a_overlap and (refused := overlap_refusal(lay)):  # Megatron-Core's rules (plan/a2a_overlap.py)
        raise SpecError("options.moe_a2a_overlap", f"false, or {refused[1]}", True)
    gpu = cluster.gpu
    s_loc = seq // lay.cp
    tokens_mb = lay.mbs * s_loc
    sp = lay.sequence_parallel
    act_bytes = 2.0 * tokens_mb * model.hidden  # one micro-batch's activations (16-bit)

    tp_dense_s = tp_layer_comm_s(cluster, lay, act_bytes, opts)
    tp_raw_s = tp_dense_s  # without the overlap: tp_layer_comm_s is raw x (1 - tp_overlap)
    if 0.0 < opts.tp_overlap:
        tp_raw_s = (tp_dense_s / (1.0 - opts.tp_overlap) if opts.tp_overlap < 1.0 else
                    tp_layer_comm_s(cluster, lay, act_bytes, dataclasses.replace(opts, tp_overlap=0.0)))
    kv_heads = model.heads if (model.mla or opts.gqa_repeat_kv) else model.kv_heads_
    kv_chunk = 2.0 * 2 * tokens_mb * max(1.0, kv_heads / lay.tp) * model.head_dim_
    dispatch, imbalance, tp_moe_s = 0.0, 1.0, tp_dense_s
    if model.moe is not None:
        elem = opts.moe_dispatch_bytes or (1 if lay.precision == "fp8" else 2)
        dispatch = tokens_mb * model.moe.top_k * model.hidden * elem / (lay.tp if sp else 1)
        # the most-loaded EP rank's share, and the routed tokens' TP traffic (plan/moe_cost.py)
        imbalance = moe_imbalance(lay, tokens_mb * lay.expert_tp / lay.tp, model.moe.top_k, opts.moe_imbalance,
                                  opts.moe_capacity_factor)
        tp_moe_s = moe_layer_tp_comm_s(lay, model.moe.top_k, model.moe.shared_experts, tp_dense_s, tp_raw_s)
        if opts.moe_dispatcher == "allgather":  # attention (+ shared experts) as dense, then the
            # dispatcher's own all-gather/reduce-scatter over the TP x EP group, not hidden (moe_cost)
            tp_moe_s = (tp_dense_s * (1 + (1 if model.moe.shared_experts and lay.tp > 1 else 0)) / 2
                        + allgather_dispatch_comm_s(cluster, lay, act_bytes, opts.algorithm))
    # DualPipe overlaps the all-to-all and the pipeline transfers with the paired chunk's compute
    # (DeepSeek-V3 s.3.2.1): not exposed; the all-gather dispatcher has no all-to-all
    no_a2a = dualpipe or opts.moe_dispatcher == "allgather"
    ep_s = 0.0 if no_a2a else ep_layer_comm_s(cluster, lay, dispatch * imbalance, opts)
    if not no_a2a and opts.moe_flex_backend and lay.ep > 1:  # DeepEP/HybridEP (plan/hier_dispatch.py)
        flex = flex_ep_layer_comm_s(cluster, lay, tokens_mb / (lay.tp if sp else 1), model.hidden, elem, model.moe,
                                    imbalance, opts.moe_router_groups, opts.algorithm, opts.moe_flex_backend,
                                    dispatcher_sms(opts))
        ep_s = ep_s if flex is None else flex * (1 - opts.ep_overlap)

    slow = 1.0 / (1.0 - opts.comm_sm_fraction)  # SMs lent to communication kernels

    def stage_pass(dense: int, moe: int, last: bool, mtp: int = 0):
        fwd = bwd = rec = 0.0
        comm = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
        runs = []  # (LayerTime, count, is_moe, layer fwd s, layer bwd s) for ZeRO-3's unit-by-unit gathers
        # an MTP module's transformer layer is of the decoder's last kind (plan/pp_layout.py)
        mtp_moe = mtp if model.moe_layers else 0
        dense, moe = dense + mtp - mtp_moe, moe + mtp_moe
        for count, is_moe in ((dense, False), (moe, True)):
            if not count:
                continue
            lt = layer_time(model, gpu, is_moe, lay.mbs, s_loc, seq, lay.tp, lay.ep, sp, lay.recompute,
                            lay.precision, opts.attention, opts.recompute_modules, lay.expert_tp,
                            imbalance if is_moe else 1.0, opts.eager, opts.fp8_scaling,
                            opts.complex_rope, opts.moe_dispatcher, opts.moe_grouped_gemm,
                            opts.moe_fused_expert_mlp)
            cp_f, cp_b = cp_layer_exposed_s(cluster, lay, kv_chunk, lt.attn_fwd_s, opts)
            ep_l = ep_lb = ep_s if is_moe else 0.0
            if is_moe and opts.moe_shared_expert_overlap:  # shared experts beside the all-to-alls (moe_cost)
                ep_l, ep_lb = shared_expert_overlap_ep_s(ep_s, lt.shared_fwd_s)
            tp_l = tp_lb = tp_moe_s if is_moe else tp_dense_s
            if is_moe and opts.moe_a2a_overlap and ep_s > 0:  # beside another micro-batch (plan/a2a_overlap.py)
                ep_l = ep_lb = overlapped_ep_s(lt, slow, tp_l, tp_lb, cp_f, cp_b, ep_s, count,
                                               unpaired_share(lay.microbatches, lay.pp, lay.vpp),
                                               opts.moe_delay_wgrad, dispatcher_sm_share(opts, gpu.sms)) / 2
            # sequence parallel: the four all-gather/reduce-scatters, one beside each GEMM (exposure.py)
            if opts.tp_overlap_gemm_bound and sp and not is_moe and lt.tp_gemm_fwd_s and lay.tp > 1:
                tp_l, tp_lb = tp_exposed_gemm_bound(tp_raw_s, opts.tp_overlap, lt.tp_gemm_fwd_s)
            full = lay.recompute == "full"
            # one layer's forward and backward (without a full-recompute replay) for ZeRO-3's units
            runs.append((lt, count, is_moe, lt.fwd_s * slow + tp_l + cp_f + ep_l,
                         (lt.bwd_s + (0.0 if full else lt.recompute_s)) * slow + tp_lb + cp_b + ep_lb))
            fwd += count * (lt.fwd_s * slow + tp_l + cp_f + ep_l)
            bwd += count * ((lt.bwd_s + lt.recompute_s) * slow + tp_lb + (tp_l if full else 0.0) + cp_b
                            + ep_lb + (ep_l if full else 0.0))
            rec += count * lt.recompute_s * slow
            comm["tp"] += count * (tp_l * (2 if full else 1) + tp_lb)
            comm["cp"] += count * (cp_f + cp_b)
            comm["ep"] += count * (ep_l * (2 if full else 1) + ep_lb)
        if last or mtp:  # the output layer and loss, once more per MTP module (plan/pp_layout.py)
            ht = head_time(model, gpu, lay.mbs, s_loc, lay.tp, "bf16" if opts.bf16_head else lay.precision,
                           opts.eager_fp32_loss, opts.megatron_unfused_ce)
            heads = (1 if last else 0) + mtp
            fwd += heads * ht.fwd_s * slow
            bwd += heads * ht.bwd_s * slow
        return fwd, bwd, rec, comm, runs

    # every distinct stage (dense/MoE mix, output layer) is priced; the slowest sets the pace
    # each stage's compute plus what it pays per micro-batch beside it: BF16_Optimizer's fp32
    # accumulation of its own parameters (plan/bf16_optimizer.py) and the framework's fixed cost per
    # layer (Options.layer_microbatch_overhead_s); stages of the same (dense, MoE, last) kind priced once
    bf16_opt = ds_bf16.applies(opts, lay)
    passes: dict[tuple, tuple] = {}

    pieces = stage_pieces(model, lay, opts)

    def priced(i: int) -> tuple:
        key = pieces[i]
        dense, moe = key[0], key[1]
        if key not in passes:
            passes[key] = stage_pass(*key)
        acc = ds_bf16.accumulate_s(sum(_stage_params(model, lay, i)), E.hbm_Bps(gpu)) if bf16_opt else 0.0
        return passes[key], acc, (dense + moe) * opts.layer_microbatch_overhead_s

    (fwd, bwd, rec, comm, runs), accum, overhead = max(
        map(priced, range(lay.pp) if opts.pp_layout else distinct_stages(model, lay.pp)),
        key=lambda r: r[0][0] + r[0][1] + r[1] + r[2])

    # each TP rank sends 1/tp of the activation with sequence parallelism or Megatron's scatter/gather
    # (Narayanan et al. SC'21 s.4.1); DeepSpeed's pipeline engine sends the whole output tensor
    split = sp or (lay.tp > 1 and opts.pp_scatter_gather)
    p2p = 0.0 if dualpipe else pp_p2p_s(cluster, lay, act_bytes / (lay.tp if split else 1), opts)
    # one forward and one backward transfer per model chunk; a blocking engine also pays the receive
    # of each (Options.pp_blocking_p2p: tests/plan/test_plan_megatron_deepspeed.py simulates it)
    p2p_mb = (4 if opts.pp_blocking_p2p else 2) * lay.vpp * p2p
    ranks = range(lay.pp // 2) if dualpipe else distinct_stages(model, lay.pp)
    fullest = max((rank_stages(lay, r, dualpipe) for r in ranks),
                  key=lambda sts: sum(sum(_stage_params(model, lay, i)) for i in sts))
    dense_p = sum(_stage_params(model, lay, i)[0] for i in fullest)
    expert_p = sum(_stage_params(model, lay, i)[1] for i in fullest)

    fill_mb = fwd + bwd + p2p_mb + accum + overhead  # the fill and flush wait for every transfer
    if opts.pp_p2p_overlap and lay.vpp > 1:  # overlap_p2p_comm: hidden under the chunks of the 1F1B
        p2p_mb = chunk_p2p_exposed_s(p2p, lay.vpp, fwd, bwd)  # body only (plan/interleaved.py)
        # ... but not in the fill and flush, which wait for every hop of the vpp-chunk ring
        fill_mb += fill_flush_p2p_s(p2p, lay.vpp, lay.pp) * lay.vpp / (lay.pp - 1) - 2 * lay.vpp * p2p
    m = lay.microbatches
    per_mb = fwd + bwd + p2p_mb + accum + overhead
    if dualpipe:  # bubble (pp/2 - 1)(F&B + B - 3W), F&B = F + B, W = B/2 (DeepSeek-V3 Table 2)
        bubble_s = (lay.pp / 2 - 1) * (fwd + 0.5 * bwd)
    else:
        bubble_s = (lay.pp - 1) / lay.vpp * fill_mb
    pipeline_s = m * per_mb + bubble_s
    dp = dp_comm(cluster, lay, dense_p, expert_p, opts)
    dp_exposed = exposed_dp_s(dp, lay, fwd, bwd, opts)  # the framework's schedule: plan/dp_schedule.py
    dp_exposed += overlap_sm_cost_s(dp, lay, fwd, bwd, opts, gpu.sms)  # SMs held by the overlapped collectives
    z3 = 0.0
    if lay.zero == 3:  # gathers and reduce-scatters of every micro-batch, unit by unit
        z3 = lay.microbatches * zero3_microbatch_s(cluster, model, lay, runs, dense_p, expert_p, opts)[0]
    # optimizer states sharded over the ZeRO groups (experts': expert data parallel); none at zero 0
    shard, expert_shard = lay.zero_shards if lay.zero >= 1 else (1, 1)
    adam_bytes = ADAM_FOREACH_BYTES_PER_PARAM if opts.adam_foreach else ADAM_BYTES_PER_PARAM
    optimizer_s = adam_bytes * (dense_p / shard + expert_p / expert_shard) / E.hbm_Bps(gpu)
    step = pipeline_s + dp_exposed + z3 + optimizer_s

    tokens = lay.gbs * seq
    peak = gpu.peak("bf16") * 1e12
    model_flops = model_flops_per_token(model, seq) * tokens
    hw_flops = model_flops + _recompute_flops(model, seq, lay.recompute, opts.recompute_modules) * tokens
    mem = memory_per_gpu(model, lay, seq, opts.attention, opts.recompute_modules, opts.fp8_activation_cache, dualpipe,
                         opts.fp8_params)
    breakdown = {
        "compute": m * (fwd + bwd) - m * rec - m * (comm["tp"] + comm["cp"] + comm["ep"]),
        "recompute": m * rec,
        "tp_comm": m * comm["tp"],
        "cp_comm": m * comm["cp"],
        "ep_comm": m * comm["ep"],
        "pp_comm": m * p2p_mb,
        "grad_accum": m * accum,
        "framework_overhead": m * overhead,
        "pipeline_bubble": bubble_s,
        "dp_comm": dp_exposed + z3,
        "optimizer": optimizer_s,
    }
    return Estimate(
        model=model.name, cluster=cluster.name, gpus=cluster.gpus, layout=lay, seq_len=seq,
        step_time_s=step, tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / cluster.gpus,
        mfu=model_flops / (step * cluster.gpus * peak), hfu=hw_flops / (step * cluster.gpus * peak),
        tflops_per_gpu=model_flops / (step * cluster.gpus) / 1e12,
        memory_GB_per_gpu=mem.total_GiB, fits=fits(mem, gpu.hbm_GB), breakdown=breakdown,
        memory={"weights": mem.weights_GiB, "gradients": mem.gradients_GiB, "optimizer": mem.optimizer_GiB,
                "activations": mem.activations_GiB, "buffers": mem.buffers_GiB},
        cluster_ref=cluster, mechanism=mechanism_class(model, lay, opts, cluster.gpu),
    )


def _recompute_flops(model: ModelSpec, seq: int, recompute: str, modules: tuple[str, ...]) -> float:
    """Recomputed FLOPs per token (HFU): full = one more forward of the layers; selective = the
    attention core (core_attn) and MLA's up-projections (mla_up_proj); norms and activation
    functions are not FLOPs by the convention."""
    from wanka.workload.flops import alternate_matmul_fraction, attention_gemms, mlp_gemms, token_flops

    tf = token_flops(model, seq)
    if recompute != "selective":
        return tf.recompute_full if recompute == "full" else 0.0
    out = tf.recompute_selective if "core_attn" in modules else 0.0
    if "mla_up_proj" in modules and model.mla is not None:
        out += model.layers * sum(2.0 * g.k * g.n for g in attention_gemms(model) if g.name in ("q_up", "kv_up"))
    dense = model.layers if model.moe is None else model.moe.dense_layers
    if "mlp" in modules:  # the dense layers' MLP GEMMs
        out += dense * sum(2.0 * g.k * g.n for g in mlp_gemms(model, model.ffn_hidden))
    if "out_proj" in modules:  # the attention output projection (MaxText save_qkv_proj)
        out += model.layers * sum(2.0 * g.k * g.n for g in attention_gemms(model) if g.name == "attn_out")
    if "alternate_matmuls" in modules:  # torchtitan per-op SAC: every second matmul of a dense block
        gemms = attention_gemms(model) + mlp_gemms(model, model.ffn_hidden)
        out += dense * alternate_matmul_fraction(model) * sum(2.0 * g.k * g.n for g in gemms)
    return out
