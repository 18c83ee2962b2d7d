"""Compute time of one micro-batch through one layer on one GPU (forward, backward, recompute).

Three kinds of kernels (docs/plan.md "Compute"):
  GEMMs        2*M*N*K FLOPs at the sustained GEMM rate (plan.efficiency) times a shape factor for
               the per-GPU dimensions after TP sharding; never faster than streaming its operands
               from HBM (roofline). Backward = 2x forward (input and weight gradients).
  attention    flash (flash2: FlashAttention-2's rate on Hopper, plan.efficiency):
               causal FLOPs (half the full s x s count) at the FlashAttention rate, backward
               2.5x forward (FlashAttention-2 recomputes QK^T: 5 GEMMs vs 2; Dao 2023 section 3.1.2).
               unfused (Megatron before 2023): full s x s batched GEMMs plus the memory traffic of
               materialised scores, softmax and dropout: 8 + 5*dropout bytes per score element
               forward (write scores, softmax read+write, dropout read+write+mask, AV read), 2x that
               backward.
  elementwise  norms, residual adds, dropout, activation function, RoPE, MoE permutation: bytes
               moved / sustained HBM bandwidth; replicated across TP ranks unless sequence parallel.
               Fused (Megatron's fused kernels, torch.compile) unless `eager` (eager_extra_bytes).
  FP8 casts    with torchao's dynamic tensorwise scaling, casts outside the GEMMs (fp8_cast_bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from wanka.plan.memo import memo_by_identity

from wanka.hardware import GPU
from wanka.plan import efficiency as E
from wanka.plan.expert_epilogue import clamp_fwd_bytes, expert_epilogue
from wanka.plan.moe_cost import KERNELS_PER_SEQUENTIAL_EXPERT_FWD, grouped_gemm_extra_kernels_fwd, moe_dispatch_bytes
from wanka.workload.activations import uses_dropout
from wanka.workload.flops import (Gemm, alternate_matmul_fraction, attention_dims, causal_pair_fraction, head_gemm,
                                  layer_gemms, windowed_layer_share)
from wanka.workload.spec import ModelSpec


@dataclass(frozen=True)
class LayerTime:
    fwd_s: float
    bwd_s: float
    recompute_s: float  # extra forward work for the chosen recompute
    hw_flops: float  # executed-by-convention FLOPs (fwd + bwd + recompute) for HFU, this GPU
    attn_fwd_s: float  # forward attention-core time (CP overlaps its ring exchange with it)
    # forward times of the four GEMMs next to a dense layer's TP collectives (QKV, attention output,
    # MLP up, MLP down), for the bound an overlap cannot beat (exposure.tp_exposed_gemm_bound); () if not those
    tp_gemm_fwd_s: tuple[float, ...] = ()
    # forward times of the shared experts' up and down GEMMs (MoE layers with shared experts), which
    # --moe-shared-expert-overlap runs beside the dispatch and combine all-to-alls (moe_cost); () if none
    shared_fwd_s: tuple[float, ...] = ()
    # forward time of the routed experts (grouped GEMMs, their activation function and epilogue, the
    # token movement), the part of an MoE layer between dispatch and combine (plan/a2a_overlap.py)
    experts_fwd_s: float = 0.0


def _gemm_time_s(g: Gemm, tokens: float, tp: int, peak: float, hbm: float, w_bytes: int,
                 moe_tokens_per_expert: float | None, etp: int | None = None,
                 local_experts: float = 1.0, imbalance: float = 1.0) -> tuple[float, float]:
    """A GEMM (a grouped GEMM over the `local_experts` experts this GPU holds, for routed experts):
    FLOP time at the shape-adjusted rate, never faster than streaming inputs, every local expert's
    weights and the outputs from HBM."""
    k, n = g.k, g.n
    split = (etp or tp) if g.expert else tp
    if g.tp_split == "n":
        n = n / split
    elif g.tp_split == "k":
        k = k / split
    # rows this GPU multiplies (MoE: its share of routed copies; experts split over etp < tp ranks
    # take tp/etp times the rows on a 1/etp slice -- the same FLOPs per GPU, other shapes)
    rows = tokens * g.per_token * (split / tp if g.expert else 1.0)
    flops = 2.0 * rows * k * n
    m_dim = moe_tokens_per_expert if g.expert and moe_tokens_per_expert else rows
    t = flops / (peak * E.shape_factor(m_dim, n, k))
    weights = k * n * (local_experts if g.expert else 1.0)
    t_mem = (rows * k + weights + rows * n) * w_bytes / hbm
    # routed experts: the most-loaded EP rank sets the pace (wanka.plan.moe_cost); FLOPs stay the mean
    slow = imbalance if g.expert else 1.0
    return max(t, t_mem) * slow, flops


def eager_extra_bytes(m: ModelSpec, ffn: float) -> tuple[float, float]:
    """Extra HBM bytes per token of one layer forward when PyTorch runs torchtitan's Llama block
    eagerly (no torch.compile): (replicated across TP unless sequence parallel, split over TP).
    Each op of torchtitan models/norms.py RMSNorm and models/llama/model.py (@9dec370ad26b) is
    its own kernel reading and writing HBM (bf16 2 B, fp32 4 B per element):
      RMSNorm  x.float() 2+4, pow(2) 4+4, mean 4, x*rsqrt 4+4, type_as 4+2, *weight 2+2 = 36 B per
               element against 4 fused (read + write bf16): +32 B x h, two norms per block.
      RoPE     xq.float() 2+4, complex multiply 4+4, type_as 4+2 = 20 B against 4: +16 B per element
               of q and of k.
      SwiGLU   silu(w1 x) 2+2, * w3 x 4+2 = 10 B against 6 (read both, write one): +4 B x ffn.
    LayerNorm (one ATen kernel) and GELU are single kernels eagerly too: nothing extra."""
    repl = 2 * 32.0 * m.hidden if m.norm == "rmsnorm" else 0.0
    rope = complex_rope_extra_bytes(m)
    swiglu = 4.0 * ffn if m.activation == "swiglu" else 0.0
    return repl, rope + swiglu


def complex_rope_extra_bytes(m: ModelSpec) -> float:
    """Extra HBM bytes per token of torchtitan's RoPE run op by op (eager_extra_bytes: +16 B per
    element of q and k). torch.compile does not fuse it: the RoPE is a complex multiply
    (models/llama/model.py apply_rotary_emb: view_as_complex(xq.float()...) * freqs_cis), and
    inductor "does not support code generation for complex operators" (torch/_inductor/lowering.py:
    aten.view_as_complex is a fallback, complex tensors are unsupported inputs), so the upcast, the
    complex multiply and the cast back stay separate kernels (Options.complex_rope)."""
    return 16.0 * (m.heads + m.kv_heads_) * m.head_dim_ if m.norm != "layernorm" else 0.0


def fp8_cast_bytes(g: Gemm, tokens: float, tp: int, sp: bool, etp: int | None, local_experts: float,
                   imbalance: float) -> tuple[float, float]:
    """(forward, backward) HBM bytes of torchao Float8Linear's dynamic tensorwise casts around one
    GEMM (torchao float8/float8_linear.py@eab345c Float8Linear.forward, manual_float8_matmul_with_
    args_in_float8): forward casts the input and the weight, backward the output gradient, and
    _scaled_mm needs transposed copies of the saved FP8 input and of the FP8 output gradient for
    the weight gradient. Per element: a cast reads 2 B and writes 1 (the amax reduction assumed
    fused into the producing kernel by torch.compile: a lower bound); the weight's amax is its own
    pass (+2); a transpose copy reads 1, writes 1. A fused QKV / up projection (one Gemm here)
    casts its shared input once (assumption: inductor CSE). Column-parallel inputs are cast on the
    sequence shard before the FP8 all-gather when sequence parallel."""
    split = (etp or tp) if g.expert else tp
    k = g.k / split if g.tp_split == "k" else g.k
    n = g.n / split if g.tp_split == "n" else g.n
    rows = tokens * g.per_token * (split / tp * imbalance if g.expert else 1.0)
    inputs = rows * k / (tp if (g.tp_split == "n" and sp and not g.expert) else 1)
    weights = k * n * (local_experts if g.expert else 1.0)
    return 3.0 * inputs + 5.0 * weights, 2.0 * inputs + 5.0 * rows * n


@memo_by_identity(2)
def layer_time(m: ModelSpec, gpu: GPU, moe_layer: bool, mbs: int, seq_local: int, seq_full: int,
               tp: int, ep: int, sp: bool, recompute: str, precision: str, attention: str,
               modules: tuple[str, ...] = ("core_attn",), etp: int | None = None,
               imbalance: float = 1.0, eager: bool = False, fp8_scaling: str = "fused",
               complex_rope: bool = False, moe_dispatcher: str = "alltoall",
               moe_grouped_gemm: bool = True, fused_expert_mlp: bool = False) -> LayerTime:
    """`modules`: what recompute=selective re-runs (Megatron-Core --recompute-modules names);
    `imbalance`: max/mean routed tokens per EP rank (wanka.plan.moe_cost); `eager`: elementwise
    ops unfused (eager_extra_bytes); `fp8_scaling`: "torchao-tensorwise" adds fp8_cast_bytes;
    `complex_rope`: a compiled block's complex RoPE still runs op by op (complex_rope_extra_bytes);
    `moe_dispatcher`, `moe_grouped_gemm`: Options' (moe_cost.moe_dispatch_bytes); `fused_expert_mlp`:
    Options.moe_fused_expert_mlp (no expert_epilogue kernels)."""
    tokens = float(mbs * seq_local)
    peak = E.gemm_peak_flops(gpu, precision)
    hbm = E.hbm_Bps(gpu)
    w_bytes = 1 if precision == "fp8" else 2
    per_expert, local = None, 1.0
    if moe_layer and m.moe is not None:  # rows one local expert sees: tokens of the EP group / experts
        per_expert = tokens * m.moe.top_k * ep / m.moe.experts * (etp or tp) / tp
        local = m.moe.experts / ep
    gemm_s = gemm_flops = up_proj_s = up_proj_flops = mlp_s = mlp_flops = expert_gemm_s = 0.0
    by_name: dict[str, float] = {}
    out_s = out_flops = 0.0
    cast_fwd = cast_bwd = 0.0  # bytes
    for g in layer_gemms(m, moe_layer):
        t, f = _gemm_time_s(g, tokens, tp, peak, hbm, w_bytes, per_expert, etp, local, imbalance)
        if precision == "fp8" and fp8_scaling == "torchao-tensorwise":
            cf, cb = fp8_cast_bytes(g, tokens, tp, sp, etp, local, imbalance)
            cast_fwd, cast_bwd = cast_fwd + cf, cast_bwd + cb
        gemm_s += t
        gemm_flops += f
        by_name[g.name] = t
        if g.expert:
            expert_gemm_s += t
        if g.name in ("q_up", "kv_up"):
            up_proj_s += t
            up_proj_flops += f
        if g.name in ("mlp_up", "mlp_down"):  # the dense MLP (recompute module "mlp")
            mlp_s += t
            mlp_flops += f
        if g.name == "attn_out":  # the attention output projection (recompute module "out_proj")
            out_s, out_flops = t, f
    # attention core, this GPU: heads/tp heads, seq_local queries against seq_full keys
    d_qk, d_v = attention_dims(m)
    heads = m.heads / tp
    full_flops = 2.0 * mbs * heads * seq_local * seq_full * (d_qk + d_v)
    drop = 1.0 if uses_dropout(m) else 0.0
    if attention in ("flash", "flash2"):
        # context parallelism: cp ring steps, each a (s/cp) x (s/cp) block at the short-block rate,
        # plus the fp32 output/LSE correction of every step after the first (read + write) and its
        # kernels (Megatron-Core/Transformer Engine ring attention)
        cp = max(1, round(seq_full / seq_local))
        # causal: half the pairs; a sliding window (ModelSpec.sliding_window) computes only the band
        # of w keys per query, and each kernel's key range shrinks to at most w
        def core(window: int | None) -> float:
            keys = min(seq_local, window or seq_local)
            pairs = causal_pair_fraction(seq_full, window)
            rate = E.attention_flops(gpu, attention) * E.attention_head_dim_factor(d_qk, attention)
            return pairs * full_flops / (rate * E.attention_length_factor(keys))
        # ModelSpec.full_attention_every: the layer-averaged core of windowed and full-causal layers
        attn_fwd = core(m.sliding_window)
        if m.sliding_window and m.full_attention_every:
            share = windowed_layer_share(m)
            attn_fwd = share * attn_fwd + (1 - share) * core(None)
        if cp > 1:
            attn_fwd += (cp - 1) * (2 * 4.0 * mbs * seq_local * heads * d_v / hbm + 2 * E.KERNEL_OVERHEAD_S)
        attn_bwd = E.attention_backward_over_forward(gpu, attention) * attn_fwd
    else:
        batched = E.gemm_peak_flops(gpu, "bf16") * E.shape_factor(d_qk)
        scores = mbs * heads * seq_local * seq_full
        attn_fwd = full_flops / batched + (8 + 5 * drop) * scores / hbm
        attn_bwd = 2 * full_flops / batched + 2 * (8 + 5 * drop) * scores / hbm
    # elementwise traffic per token (bytes): two norms (read+write 2h each), two residual adds
    # (read 2h+2h, write 2h), dropout masks, activation function, RoPE on q and k
    h = m.hidden
    repl = tokens * h * (8 + 12 + 2 * drop)
    ffn_traffic = (6 if m.activation == "swiglu" else 4) * m.ffn_hidden
    routed_traffic = 0.0
    if moe_layer and m.moe is not None:
        act = (6 if m.activation == "swiglu" else 4) * m.moe.ffn_hidden
        routed_traffic = imbalance * m.moe.top_k * (act + 8 * h)
        ffn_traffic = routed_traffic + m.moe.shared_experts * act
    rope = 0 if m.norm == "layernorm" else 4 * (m.heads + m.kv_heads_) * m.head_dim_
    # qk_norm: Megatron-Core's q_layernorm / k_layernorm (attention.py get_query_key_value_tensors),
    # two TE RMSNorm kernels over the q and k heads, read + write 2 bytes each, like the layer norms
    qk_norm = 4 * (m.heads + m.kv_heads_) * m.head_dim_ if m.qk_norm else 0
    split = tokens * (ffn_traffic + rope + qk_norm)
    if eager:
        ffn = m.moe.top_k * m.moe.ffn_hidden if (moe_layer and m.moe is not None) else m.ffn_hidden
        more_repl, more_split = eager_extra_bytes(m, ffn)
        repl, split = repl + tokens * more_repl, split + tokens * more_split
    elif complex_rope:
        split += tokens * complex_rope_extra_bytes(m)
    elem_fwd = (repl / (tp if sp else 1) + split / tp) / hbm
    launch = E.KERNEL_OVERHEAD_S * (E.KERNELS_PER_LAYER_FWD + (2 if m.qk_norm else 0))
    move_fwd = move_bwd = 0.0  # the all-gather dispatcher's and SequentialMLP's token movement
    if moe_layer and m.moe is not None:
        move_fwd, move_bwd = moe_dispatch_bytes(m, tokens, ep, tp, etp or tp, imbalance, moe_dispatcher,
                                                moe_grouped_gemm)
        if not moe_grouped_gemm:  # each local expert's kernels, one expert after another
            launch += E.KERNEL_OVERHEAD_S * KERNELS_PER_SEQUENTIAL_EXPERT_FWD * local
        else:  # TE GroupedLinear: one cuBLAS GEMM per local expert over 4 streams (moe_cost)
            launch += E.KERNEL_OVERHEAD_S * grouped_gemm_extra_kernels_fwd(local)
    epi_fwd = epi_bwd = 0.0  # expert bias / clamped GLU kernels outside the grouped GEMMs (expert_epilogue)
    if moe_layer and m.moe is not None and not fused_expert_mlp:
        b_fwd, b_bwd, k_fwd, k_bwd = expert_epilogue(m, local)
        rows = tokens * m.moe.top_k * imbalance / tp
        epi_fwd = rows * b_fwd / hbm + E.KERNEL_OVERHEAD_S * k_fwd
        epi_bwd = rows * b_bwd / hbm + E.KERNEL_OVERHEAD_S * k_bwd
    fwd = gemm_s + attn_fwd + elem_fwd + launch + epi_fwd + (cast_fwd + move_fwd) / hbm
    bwd = 2 * gemm_s + attn_bwd + 2 * elem_fwd + 2 * launch + epi_bwd + (cast_bwd + move_bwd) / hbm
    attn_model_flops = full_flops  # HFU counts attention as the model convention does (full s x s)
    hw = 3 * (gemm_flops + attn_model_flops)
    recompute_s = 0.0
    if recompute == "full":
        recompute_s = fwd
        hw += gemm_flops + attn_model_flops
    elif recompute == "selective":
        if "core_attn" in modules:
            recompute_s += attn_fwd
            hw += attn_model_flops
        if "layernorm" in modules:  # two norms: read and write 2h bytes per token each
            recompute_s += tokens * h * 8 / (tp if sp else 1) / hbm
        if "mla_up_proj" in modules and m.mla is not None:
            recompute_s += up_proj_s + tokens * rope / tp / hbm
            hw += up_proj_flops
        if "alternate_matmuls" in modules and not moe_layer:  # torchtitan per-op SAC: every second matmul
            share = alternate_matmul_fraction(m)
            recompute_s += share * gemm_s + elem_fwd  # + the unsaved elementwise ops (norms, SiLU, RoPE)
            hw += share * gemm_flops
        if "mlp" in modules and not moe_layer:  # the dense MLP's GEMMs and activation function again
            recompute_s += mlp_s + tokens * (6 if m.activation == "swiglu" else 4) * m.ffn_hidden / tp / hbm
            hw += mlp_flops
        if "out_proj" in modules:  # MaxText remat policies that do not save "out_proj" (save_qkv_proj)
            recompute_s += out_s
            hw += out_flops
        if "moe_act" in modules and moe_layer and m.moe is not None:
            recompute_s += tokens * m.moe.top_k * (6 if m.activation == "swiglu" else 4) * m.moe.ffn_hidden / tp / hbm
            if not fused_expert_mlp:
                recompute_s += tokens * m.moe.top_k * imbalance * clamp_fwd_bytes(m) / tp / hbm
    names = ("qkv", "attn_out", "mlp_up", "mlp_down")
    tp_gemms = tuple(by_name[n] for n in names) if all(n in by_name for n in names) else ()
    shared = tuple(by_name[n] for n in ("shared_up", "shared_down")) if "shared_up" in by_name else ()
    experts = expert_gemm_s + tokens * routed_traffic / tp / hbm + epi_fwd + move_fwd / hbm
    return LayerTime(fwd, bwd, recompute_s, hw, attn_fwd, tp_gemms, shared, experts)


@memo_by_identity(2)
def head_time(m: ModelSpec, gpu: GPU, mbs: int, seq_local: int, tp: int, precision: str,
              eager_fp32_loss: bool = False, megatron_unfused_ce: bool = False) -> LayerTime:
    """Output projection and fp32 softmax cross-entropy of the last stage. Fused: 12 B per logit
    each way (fp32 logits written, read for the softmax, gradient written). `eager_fp32_loss`:
    torchtitan's uncompiled cross_entropy(pred.float()) (train.py loss_fn @9dec370ad26b), kernel by
    kernel: forward .float() 2+4, log_softmax 4+4 = 14 B; backward nll_loss's fp32 gradient 4,
    log_softmax backward 4+4+4, the cast back to bf16 4+2 = 22 B. `megatron_unfused_ce`: Megatron's
    VocabParallelCrossEntropy without --cross-entropy-loss-fusion (tensor_parallel/cross_entropy.py
    @core_r0.8.0; the same kernels in 2021's mpu/cross_entropy.py on output.float()): forward
    .float() 2+4, max 4, in-place subtract 4+4, in-place exp 4+4, sum 4, in-place divide (the softmax
    kept for backward) 4+4 = 38 B; backward the in-place multiply by the loss gradient 4+4, the cast
    back to 16 bits 4+2 = 14 B."""
    tokens = float(mbs * seq_local)
    peak = E.gemm_peak_flops(gpu, precision)
    hbm = E.hbm_Bps(gpu)
    t, flops = _gemm_time_s(head_gemm(m), tokens, tp, peak, hbm, 2, None)
    logits = tokens * m.vocab / tp
    ce_fwd, ce_bwd = (14 * logits, 22 * logits) if eager_fp32_loss else (12 * logits, 12 * logits)
    if megatron_unfused_ce:
        ce_fwd, ce_bwd = 38 * logits, 14 * logits
    return LayerTime(t + ce_fwd / hbm, 2 * t + ce_bwd / hbm, 0.0, 3 * flops, 0.0)
