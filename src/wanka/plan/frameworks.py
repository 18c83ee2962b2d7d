"""Framework profiles: named, documented sets of mechanism switches (planner Options).

A profile says *how a training framework runs* a layout -- when it reduces gradients, what it
overlaps, which attention kernel it has -- each switch with the framework source it comes from.
`wanka plan --framework NAME` prices with it; `wanka plan validate` maps each published row's
framework text to one (published.framework_options). docs/plan.md "Framework profiles" lists them.

    wanka plan --model llama3-70b --cluster meta-24k-h100 --gpus 1024 \
        --layout "tp=8,pp=4,gbs=512,zero=2" --framework deepspeed
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from wanka.errors import SpecError
from wanka.plan.exposure import Options
from wanka.plan.row_text import words

# shared sources (file@project, paper section)
_MCORE_DDP = ("Megatron-Core: grads accumulate in the fp32 main-grad buffer, all but the last micro-batch "
              "run under no_sync (pipeline_parallel/schedules.py), the bucketed reduce-scatter overlaps the "
              "last backward (--overlap-grad-reduce, distributed/param_and_grad_buffer.py), the all-gather "
              "the next forward (--overlap-param-gather, optimizer/distrib_optimizer.py)")
_TE_TP_OVERLAP = ("Transformer Engine userbuffers overlap TP all-gather/reduce-scatter with the GEMMs "
                  "(--tp-comm-overlap, on in NeMo/Megatron-Bridge recipes); the hidden fraction 0.5 is an assumption")
_DS_REDUCE = ("DeepSpeed runtime/engine.py allreduce_gradients: stage 1 (and 0) reduce only at the accumulation "
              "boundary, after the backward; stage >= 2 every micro-batch (overlapping_partition_gradients_"
              "reduce_epilogue), on a side stream with overlap_comm and waited for at the end of that backward")
_DS_GATHER = "DeepSpeed runtime/zero/stage_1_and_2.py step(): all_gather_dp_groups right after the optimizer step"
_DS_PIPE = ("DeepSpeed runtime/pipe/engine.py: the pipeline engine turns enable_backward_allreduce off and reduces "
            "gradients once, after the last micro-batch (_exec_reduce_grads), not overlapped; ZeRO-2/3 are refused "
            "with pipeline parallelism")
_DS_P2P = ("DeepSpeed runtime/pipe/engine.py: with model parallelism the pipeline engine partitions each stage's "
           "output over the TP (slice) group before sending and re-assembles it on the receiver "
           "(is_pipe_partitioned, PartitionedTensor; since the engine's first version 65c2f974d, 2020-09), and the "
           "gradients too from e2fdd254e (2021-09, is_grad_partitioned): 1/tp of the tensor per rank, as "
           "Megatron's scatter/gather (Narayanan et al. SC'21 s.4.1)")
_DS_BLOCKING = ("DeepSpeed runtime/pipe/p2p.py send/recv assert async_op == False: dist.send / dist.recv block the "
                "stage until the peer's matching call, so each stage pays its sends and its receives (a simulation "
                "of schedule.py TrainSchedule: (m + pp - 1)(F + B + 4T))")
_DS_COMM_DTYPE = ("DeepSpeed runtime/engine.py communication_data_type: unless configured, gradients are reduced in "
                  "the training dtype (fp16/bf16), 2 bytes, not in fp32")
_DS_BF16 = ("DeepSpeed BF16_Optimizer (runtime/bf16_optimizer.py@56c522386, 'bf16+pipeline parallelism', 2022-04; "
            "the pipeline engine takes bf16 only at ZeRO stage 0 with it): update_hp_grads adds every micro-batch's "
            "bf16 gradients into a full fp32 buffer (18 B per parameter), _bf16_reduce_grads all-reduces that fp32 "
            "buffer, step() all-gathers the bf16 partitions (plan/bf16_optimizer.py)")
# Measured, not explained: BigScience's MBS sweep at fixed layouts on Jean Zay's A100 80GB
# (bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md@9e64ede, "48 node contenders",
# 2022-02-21: 181B, NHIDDEN 14336, 72 layers, TP8, DP4 PP12 at MBS 1/2/4/8 = 143.31/134.02/123.69/129.26
# s per iteration, DP8 PP6 at MBS 1/2/4 = 139.82/131.02/121.48 s, GBS 2048): smaller micro-batches are
# slower per token by far more than wanka's kernels and bubble say; least squares of (measured - priced)
# over (micro-batch slots x layers per stage) gives 11-12 ms per layer per micro-batch (11.0 with 112
# heads, 12.2 with 64: the sweep's head count is not stated), without a trend in MBS or in layers per
# stage. Megatron-LM's own runs at MBS 1 (SC'21, calibration set) show no such cost, so it belongs to the
# Megatron-DeepSpeed path (DeepSpeed activation checkpointing, pipeline engine); which part is not found.
_DS_LAYER_OVERHEAD_S = 0.011
_DS_LAYER_OVERHEAD = ("a fixed cost per layer per micro-batch of the 2021-22 Megatron-DeepSpeed path, 11 ms, measured "
                      "from BigScience's MBS sweep (chronicles-prequel.md@9e64ede) -- not attributed to a mechanism")
# DeepSpeed ZeRO-3's default stage3_max_reuse_distance since its release (runtime/zero/constants.py@599258f97,
# 2021-03-08; the same in v0.3.13 and today): 1e9 elements. Its other limit, stage3_max_live_parameters (also
# 1e9: no prefetch while that many are gathered), is Options.zero3_max_live_params, left off here: SC'21's
# 530B rows (weights of 1.3-1.7e9) hide their compute under the gathers (180 s at 1,120 GPUs, 184 s at 2,240
# while compute halves), which the gate would forbid -- those runs raised it (docs/plan.md "ZeRO-3")
_DS3_REUSE = 1e9
_DS3_KEEP = ("DeepSpeed stage 3 (runtime/zero/stage3.py@v0.3.13, PartitionedParameterCoordinator.release_sub_module/"
             "_keep_for_later): a parameter whose next use is < stage3_max_reuse_distance (default 1e9, "
             "zero/constants.py) elements away stays gathered -- with full recompute, the last weights of each "
             "layer between their recomputed forward and their backward")
# Habana's fork (mlcommons/training_results_v3.1 Intel-HabanaLabs/benchmarks/gpt3/Megatron-DeepSpeed/run_gpt.sh)
_HPU_SDPA = ("run_gpt.sh USE_FUSED_SDPA='--use-fused-sdpa true' (v3.1 and v4.0): Habana's fused scaled-dot-product "
             "attention, a FlashAttention-style kernel that never materialises the s x s scores")
# Of a layer's 8 sequence-parallel collectives (forward: all-gather before QKV and FC1, reduce-scatter
# after the projection and FC2; backward: the reverse of each), the fork issues the all-gather and
# its backward reduce-scatter async_op=True with no wait (megatron/mpu/layers.py AllGather); the HPU
# runtime orders them by data dependence, so the reduce-scatter of QKV's and FC1's input gradient
# runs beside their weight-gradient GEMMs, which do not need it: 2 of 8 hidden (each bounded by its
# GEMM, Options.tp_overlap_gemm_bound). The forward all-gathers feed the next GEMM: exposed.
# Options.tp_overlap is one fraction for every collective, so this prices 1/4 of each hidden: the same
# total wherever a GEMM outlasts a quarter of its collective (GPT-3 175B at tp 8).
HPU_ASYNC_TP_HIDDEN = 2 / 8
_HPU_ASYNC_TP = ("megatron/mpu/layers.py AllGather (Habana fork, training_results_v3.1): the sequence-parallel "
                 "all-gather and its backward reduce-scatter are issued async_op=True without a wait; the "
                 "backward reduce-scatters of QKV's and FC1's input gradients run beside their weight-gradient "
                 "GEMMs: 2 of a layer's 8 TP collectives hidden")
# Without --sequence-parallel (MLPerf v3.0's run_gpt.sh passes none) ColumnParallelLinear and RowParallelLinear use
# copy_to_/reduce_from_tensor_model_parallel_region: a synchronous all-reduce, forward and backward (training_results
# _v3.0 Intel-HabanaLabs/benchmarks/gpt3/Megatron-DeepSpeed/megatron/mpu/layers.py @ 63e326c); nothing async there
_HPU_NO_SP = "validate sets tp_overlap 0 for a row of this profile without sequence parallelism (published.py)"
# The output logits: parallel_lm_logits calls linear_with_grad_accumulation_and_async_allreduce on the output (or
# tied embedding) weight -- a plain 16-bit matmul; only the layers' ColumnParallelLinear/RowParallelLinear forward
# through te.Linear (HabanaAI/Megatron-DeepSpeed@891d6db megatron/model/language_model.py parallel_lm_logits,
# core/tensor_parallel/layers.py; the same in training_results_v3.1's fork, megatron/mpu/layers.py te.Linear)
_HPU_BF16_HEAD = ("megatron/model/language_model.py parallel_lm_logits (HabanaAI/Megatron-DeepSpeed@891d6db; MLPerf "
                  "v3.1/v4.0 forks): the logits GEMM is a plain BF16 matmul, FP8 only in the layers' te.Linear")
_HPU_NO_LAYER_OVERHEAD = ("an assumption: the 11 ms per layer per micro-batch of megatron-deepspeed was measured on "
                          "CUDA in eager mode (BigScience, A100) and is not attributed; Habana runs the model as "
                          "lazy-mode HPU graphs (Gaudi docs 'PyTorch Lazy Mode'), so it is not carried over")
_OLD_ATTN = ("Megatron-LM before 2023 had no FlashAttention (published 2022, integrated in 2023): scores "
             "materialised (fused scale-mask-softmax kernels, still s x s in HBM)")
_NO_TP_OVERLAP = "Megatron-LM before Megatron-Core/TE userbuffers (2023) ran TP collectives between the GEMMs"
_FSDP = ("PyTorch FSDP/FSDP2: every backward reduce-scatters unless no_sync / set_requires_gradient_sync(False); "
         "the post-backward callback waits for the reduce-scatter stream; the next block's all-gather is "
         "prefetched one block ahead (torch/distributed/fsdp, torchtitan applies fully_shard per block)")
_XLA = ("XLA/GSPMD (MaxText, Paxml): tensor-parallel collectives are not decomposed into the GEMMs unless "
        "collective matmul is asked for (MaxText opt-in); the latency-hiding scheduler overlaps the FSDP "
        "all-gathers/reduce-scatters with the layer scan (--xla_gpu_enable_latency_hiding_scheduler, "
        "pipelined all-gather/reduce-scatter flags in NVIDIA's MaxText recipes, dgxc-benchmarking "
        "maxtext/configure.sh@8f5cbb37)")
_LOCAL_DDP = ("Megatron-LM from 2023 until --overlap-grad-reduce (commit 2d5220a424, 2023-08-16): --DDP-impl defaults "
              "to 'local' (arguments.py@285068c8) and train_step calls optimizer.reduce_model_grads after "
              "forward_backward_func returns (training.py@285068c8): the gradient all-reduce runs whole after the "
              "last backward, in FP32 (bf16 sets accumulate_allreduce_grads_in_fp32)")
_LLAMA3_CP = ("Llama 3 (arXiv 2407.21783 s.3.3.2): context parallelism all-gathers K and V and computes the local Q "
              "chunk's attention; 'the all-gather communication latency is exposed in the critical path'")
_LLAMA3_FSDP = ("Llama 3 s.3.3.2: FSDP shards optimizer states and gradients, weights not resharded after forward; "
                "FSDP is the outermost dimension, prefetching weights and reducing gradients asynchronously; "
                "gradients accumulated and reduce-scattered in FP32")
_PT_FA2 = ("PyTorch-native stacks reach FlashAttention-2 on Hopper: PyTorch SDPA's flash backend is FlashAttention-2 "
           "(integrated in PyTorch 2.2), and the flash-attn package's Hopper kernels (FlashAttention-3, Shah et al., "
           "arXiv:2407.08608) appeared in July 2024, after the 2023-24 runs these profiles describe (MosaicML's MPT "
           "and IBM's fms-fsdp tables; Llama 3 405B, whose finished pre-training arXiv:2407.21783 reports). An "
           "inference from dates: none of these runs names its attention kernel; a row naming FlashAttention-3 or "
           "cuDNN attention is priced at the FA3-class rate (published.FA3_NAMED)")
_MEGASCALE = ("MegaScale (Jiang et al., NSDI'24 s.3.2): TP/SP all-gather and reduce-scatter fused into the "
              "GEMMs (hidden fraction 0.8: an assumption); DP reduce-scatter overlapped with the last "
              "micro-batch's backward, all-gather with the first forward")
_MEGASCALE_FA2 = ("MegaScale (Jiang et al., NSDI'24, p. 5, efficient operators): 'For the attention part, we adopt "
                  "FlashAttention-2' -- FA2's rate (the same as the architecture's on Ampere, below FA3's on Hopper)")


@dataclass(frozen=True)
class Framework:
    name: str
    summary: str
    switches: dict = field(default_factory=dict)  # Options fields
    sources: dict = field(default_factory=dict)  # Options field -> where the behaviour comes from
    pipeline_switches: dict = field(default_factory=dict)  # replaces switches when pp > 1
    zero_switches: dict = field(default_factory=dict)  # {zero stage: switches}, applied last

    def options(self, layout=None, base: Options | None = None) -> Options:
        """Options for `layout` (its pp and zero stage select the schedule) on top of `base`."""
        kw = dict(self.switches, profile=self.name)
        if layout is not None and layout.pp > 1:
            kw.update(self.pipeline_switches)
        elif layout is not None:
            kw.update(self.zero_switches.get(layout.zero, {}))
        return dataclasses.replace(base or Options(), **kw)


# the interleaved schedule's DP sync per model chunk (plan/interleaved.py), read in Megatron-LM
# megatron/training/training.py + core/pipeline_parallel/schedules.py at core_r0.8.0 (baf94af3c6) and core_r0.10.0
_DP_PER_CHUNK = ("Megatron-LM training.py: with --overlap-grad-reduce and --delay-grad-reduce (r0.8; --align-grad-reduce "
                 "from r0.9, both on by default) config.grad_sync_func[chunk] = start_grad_sync; schedules.py "
                 "backward_step_helper launches each chunk's reduction after its last backward, at the same time "
                 "across the pipeline group, so chunk c's runs under the c * pp chunk-backwards left")
_ALIGN_AG = ("Megatron-LM core_r0.10.0 training.py: --align-param-gather (on by default, --no-align-param-gather) sets "
             "config.param_sync_func[chunk] = start_param_sync, launched for chunk k+1 when chunk k starts its first "
             "forward; at core_r0.8.0 (--delay-param-gather, off by default) the forward pre-hooks chain the buckets "
             "one at a time (optimizer/distrib_optimizer.py zero_grad/_finish_param_sync_helper): validate reads "
             "'r0.8' and earlier from a row's framework text")
_MCORE = dict(tp_overlap=0.5, grad_sync="per_step", dp_overlap=True, moe_dispatch_bytes=2, dp_sync_per_chunk=True,
              align_param_gather=True)
_MCORE_SRC = {"tp_overlap": _TE_TP_OVERLAP, "grad_sync": _MCORE_DDP, "dp_overlap": _MCORE_DDP,
              "moe_dispatch_bytes": "Megatron-Core transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: "
                                    "the all-to-all moves the permuted hidden states in their dtype (BF16; FP8 "
                                    "casts happen inside Transformer Engine's GEMMs), also in FP8 runs",
              "dp_sync_per_chunk": _DP_PER_CHUNK, "align_param_gather": _ALIGN_AG}
_MLPERF_CFG = ("mlcommons/training_results_v5.1 NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_common.sh and "
               "llama31_405b/implementations/theia_ngpu512_ngc25.09_nemo/config_common.sh")
# Transformer Engine userbuffers, per GEMM, in NVIDIA's MLPerf GPT-3 submission
# (training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/conf/tp_overlap/h100tp4mbs2.yaml):
# the four sequence-parallel collectives of a layer's forward and the four of its backward, each
# "ring_exchange" (the all-gather/reduce-scatter moves chunk by chunk under the GEMM of the chunk in
# hand, copy-engine driven, num_sm 1), "bulk" (the dgrad reduce-scatter runs whole under the wgrad
# GEMM) or "pipeline" with num_splits (the GEMM in k chunks, each chunk's reduce-scatter under the
# next chunk's GEMM: the last one is exposed)
MLPERF_USERBUFFERS = {"qkv_fprop": ("ring_exchange", 1), "proj_fprop": ("pipeline", 4),
                      "fc1_fprop": ("ring_exchange", 1), "fc2_fprop": ("ring_exchange", 1),
                      "qkv_dgrad": ("bulk", 1), "proj_dgrad": ("ring_exchange", 1),
                      "fc1_dgrad": ("bulk", 1), "fc2_dgrad": ("ring_exchange", 1)}


def userbuffers_hidden_fraction(methods: dict[str, tuple[str, int]]) -> float:
    """Share of a layer's TP traffic hidden (Options.tp_overlap) when every collective is as long
    as the others (same bytes: b*s*h) and each GEMM outlasts the collective it carries: ring
    exchange and bulk hide all of theirs, a k-split pipeline (k - 1)/k."""
    hidden = [(k - 1) / k if method == "pipeline" else 1.0 for method, k in methods.values()]
    return sum(hidden) / len(hidden)


_MLPERF_SRC = dict(_MCORE_SRC,
                   dp_sync_per_chunk="off: taken on, the submissions' few-micro-batch steps run too fast (GPT-3 m = 6: "
                                     "+1% -> +22%); what slows them is not modelled (docs/plan.md 'Interleaved schedule')",
                   fp8_params=f"FP8_PARAM_GATHER=True ({_MLPERF_CFG}; GPT-3 and Llama 3.1 405B configs: FP8_PARAMS, "
                              "published_runs/mlperf.md): NeMo's fp8_params, weights kept in FP8 (plan/memory.py)",
                   tp_overlap="Transformer Engine userbuffers as the submission configures them per GEMM (MLPERF_USERBUFFERS, "
                              "h100tp4mbs2.yaml): 7 of a layer's 8 collectives hidden whole, the pipelined proj_fprop "
                              "reduce-scatter 3/4 (4 splits) = 31/32 (userbuffers_hidden_fraction); holds while each "
                              "GEMM outlasts its collective (large models)",
                   grad_bytes="gradients reduced in BF16: GPT-3 (NeMo 1 + Apex DistributedFusedAdam) `grad_sync_dtype: bf16` "
                              "(training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/nemo/conf/optim/"
                              "distributed_fused_adam.yaml); Llama 3.1 (NeMo 2, Megatron-Core DDP) `grad_reduce_in_fp32="
                              "False` in pretrain.py's DistributedDataParallelConfig (v5.0 llama31_405b, v5.1 llama31_8b)",
                   pp_p2p_overlap="overlap_p2p_comm on (conf/custom.yaml `overlap_p2p_comm: ${...OVERLAP_P2P_COMM,True}`, "
                                  "no config overrides it; v4.0 gpt3 conf/megatron_gpt_config_custom.yaml likewise): with "
                                  "an interleaved pipeline the transfers hide under the chunks (plan/interleaved.py)",
                   dp_comm_ctas=f"NCCL_MIN_CTAS=16, NCCL_MAX_CTAS=32 with NVTE_*_LAYERNORM_SM_MARGIN=16 ({_MLPERF_CFG}): "
                                "at least 16 SMs run the overlapped DP collectives (plan/dp_schedule.py)")
# AMD's MLPerf Training v5.1 Llama 3.1 8B (training_results_v5.1 AMD/benchmarks/llama31_8b/implementations/
# MI3{50,55}X_EPYC_9575F_pytorch_llama3_8b @ 441d65f4445c; the two systems' files differ only in MAX_LR and the
# platform name): NeMo v2.5.0rc0 + ROCm/Megatron-LM 5c34c4cf + ROCm/TransformerEngine f3692b67 (Dockerfile).
# src/train.py builds DistributedDataParallelConfig(grad_reduce_in_fp32=False, use_distributed_optimizer=True,
# fp8_param_gather=True) without overlap_grad_reduce/overlap_param_gather and adds no MegatronCommOverlapCallback;
# Megatron-Core's defaults are False (distributed/distributed_data_parallel_config.py) and NeMo's MegatronStrategy
# passes the config on unchanged (nemo/lightning/pytorch/strategies/megatron_strategy.py@v2.5.0rc0). NVIDIA's
# submission of the same benchmark sets both from its config (NVIDIA/.../llama31_8b/implementations/nemo/pretrain.py
# 'overlap_grad_reduce = config.model.optim.overlap_grad_reduce' and MegatronCommOverlapCallback).
_AMD_MLPERF_CFG = "training_results_v5.1 AMD/benchmarks/llama31_8b/implementations/MI355X_EPYC_9575F_pytorch_llama3_8b"
_AMD_NO_DP_OVERLAP = (f"{_AMD_MLPERF_CFG}/src/train.py: DistributedDataParallelConfig without overlap_grad_reduce / "
                      "overlap_param_gather, no MegatronCommOverlapCallback; Megatron-Core defaults both to False "
                      "(distributed_data_parallel_config.py), NeMo v2.5.0rc0's MegatronStrategy keeps the config: the "
                      "reduce-scatter runs after the last backward, the FP8 all-gather after the step")
_AMD_MLPERF_SRC = dict(_MCORE_SRC, dp_overlap=_AMD_NO_DP_OVERLAP, param_gather_overlap=_AMD_NO_DP_OVERLAP,
                       fp8_params=f"{_AMD_MLPERF_CFG}/config_MI355X_1x8x1_8b.sh FP8_PARAMS=1 and train.py fp8_param_gather=True, "
                                  "fp8='hybrid': weights kept in FP8 (plan/memory.py)",
                       grad_bytes=f"{_AMD_MLPERF_CFG}/src/train.py grad_reduce_in_fp32=False: gradients reduced in BF16",
                       tp_overlap=f"{_AMD_MLPERF_CFG}/config_MI355X_1x8x1_8b.sh TP_COMM_OVERLAP=False (and TP=1)")
# MindSpeed-LLM's MC2 linears (modellink/core/tensor_parallel/ascend_turbo/mc2_linears_seq_parallel.py@75f2e902022c),
# per collective in the userbuffers vocabulary above: forward, ColumnSeqParallelLinear runs torch_npu's
# npu_all_gather_base_mm, which streams the gathered rows chunk by chunk into the matmul ("融合算子内部实现通信和
# 计算流水并行", torch_npu API reference npu_all_gather_base_mm; the local chunk first: localTiling in CANN's
# all_gather_matmul_tiling.h) -- hidden whole, as a ring exchange; RowSeqParallelLinear runs
# npu_mm_reduce_scatter_base, the matmul in chunks each reduce-scattered under the next -- a pipeline whose last
# chunk is exposed, with one chunk per TP rank (8 on Atlas A2's 8-NPU HCCS mesh: an assumption, the chunk count
# is the kernel's tiling). Backward: the row-parallel dgrad is npu_all_gather_base_mm again (hidden); the
# column-parallel backward re-gathers its input with an async all-gather under the dgrad matmul and reduce-scatters
# the input gradient asynchronously under the wgrad matmul (bulk overlap).
MINDSPEED_MC2 = {"qkv_fprop": ("ring_exchange", 1), "proj_fprop": ("pipeline", 8),
                 "fc1_fprop": ("ring_exchange", 1), "fc2_fprop": ("pipeline", 8),
                 "qkv_dgrad": ("bulk", 1), "proj_dgrad": ("ring_exchange", 1),
                 "fc1_dgrad": ("bulk", 1), "fc2_dgrad": ("ring_exchange", 1)}
_MC2 = ("MindSpeed-LLM MC2 (--use-mc2; the README's performance table is measured with it on, README.md@75f2e902022c "
        "line 89): the sequence-parallel all-gather/reduce-scatter fused into or run asynchronously under the matmuls "
        "(MINDSPEED_MC2): 31/32 of a layer's TP traffic hidden (userbuffers_hidden_fraction), while each matmul "
        "outlasts its collective. A script without --use-mc2 ran without it (the row says comm_overlap 'none')")
# overlap_p2p_comm (plan/interleaved.py; it only acts with vpp > 1). Megatron-Core's ModelParallelConfig
# defaults it to False (megatron/core/model_parallel_config.py `overlap_p2p_comm: bool = False`), so the
# megatron-core/nemo profiles leave it off and a run's config turns it on
# (published.framework_options reads "overlap_p2p_comm" from a row); Megatron-LM's training arguments
# turn it on by default:
_MLM_P2P = ("Megatron-LM arguments.py `--no-overlap-p2p-communication` (store_false, dest overlap_p2p_comm): on "
            "by default since commit 4eeff55d1f 'Make overlap_p2p_comm the default' (2023-10-12, first in "
            "core_r0.4.0); added opt-in as --overlap-p2p-communication in f9283c5a8a (2023-05-31); switched off "
            "by validate_args when the schedule is not interleaved")
_MINDSPEED_P2P = ("MindSpeed-LLM parses Megatron-LM's arguments (so inherits --no-overlap-p2p-communication's default, "
                  "on) and keeps the value through its pp = 2 re-validation (mindspeed/arguments.py validate_args "
                  "wrapper, flag_overlap_p2p_comm; mindspeed_llm/features_manager/megatron_basic/training_basic.py); "
                  "its docs list no-overlap-p2p-communication as the opt-out")
_DS_PIPE_SWITCHES = dict(grad_sync="per_step", dp_overlap=False, param_gather_overlap=False, bf16_optimizer=True)

PROFILES: dict[str, Framework] = {p.name: p for p in (
    Framework("megatron-core", "Megatron-Core (2023-): distributed optimizer, overlapped DP, TE TP overlap",
              _MCORE, _MCORE_SRC),
    Framework("nemo", "NeMo 2 / Megatron-Bridge recipes: Megatron-Core underneath", _MCORE, _MCORE_SRC),
    Framework("nemo-mlperf", "NVIDIA's MLPerf Training NeMo implementation: Megatron-Core with FP8 parameters and "
              "NCCL held to >= 16 CTAs, per-GEMM userbuffers TP overlap",
              dict(_MCORE, fp8_params=True, dp_comm_ctas=16, grad_bytes=2, pp_p2p_overlap=True,
                   tp_overlap=userbuffers_hidden_fraction(MLPERF_USERBUFFERS), dp_sync_per_chunk=False),
              _MLPERF_SRC),
    Framework("nemo-mlperf-rocm", "AMD's MLPerf Training NeMo 2.5 on ROCm (Megatron-Core, ROCm Transformer Engine): "
              "FP8 parameters, distributed optimizer without overlapped DP collectives, no TP overlap",
              dict(_MCORE, fp8_params=True, grad_bytes=2, tp_overlap=0.0, dp_overlap=False, param_gather_overlap=False),
              _AMD_MLPERF_SRC),
    Framework("mindspeed", "MindSpeed-LLM (Huawei Ascend, torch_npu): Megatron-Core models, MC2 fused TP "
              "communication, distributed optimizer",
              dict(_MCORE, tp_overlap=userbuffers_hidden_fraction(MINDSPEED_MC2), pp_p2p_overlap=True),
              dict(_MCORE_SRC, tp_overlap=_MC2, pp_p2p_overlap=_MINDSPEED_P2P)),
    Framework("megatron-lm", "Megatron-LM (2023-, on Megatron-Core) without NeMo's recipe defaults: TP overlap "
              "only when asked for", dict(tp_overlap=0.0, grad_sync="per_step", dp_overlap=True, moe_dispatch_bytes=2, pp_p2p_overlap=True,
                   dp_sync_per_chunk=True, align_param_gather=True),
              {"tp_overlap": "--tp-comm-overlap is opt-in in Megatron-LM (arguments.py)", "grad_sync": _MCORE_DDP,
               "dp_overlap": _MCORE_DDP, "moe_dispatch_bytes": _MCORE_SRC["moe_dispatch_bytes"],
               "pp_p2p_overlap": _MLM_P2P, "dp_sync_per_chunk": _DP_PER_CHUNK, "align_param_gather": _ALIGN_AG}),
    Framework("megatron-lm-2021", "Megatron-LM as in SC'21/MLSys'23 (2021-2022): unfused attention, no TP overlap",
              dict(attention="unfused", tp_overlap=0.0, grad_sync="per_step", dp_overlap=True),
              {"attention": _OLD_ATTN, "tp_overlap": _NO_TP_OVERLAP,
               "dp_overlap": "torch DDP overlaps the all-reduce with the backward (Li et al., VLDB'20)",
               "grad_sync": _MCORE_DDP}),
    Framework("megatron-lm-2023", "Megatron-LM in 2023 before --overlap-grad-reduce: 'local' DDP, FP32 gradient "
              "all-reduce after the backward, FlashAttention opt-in, no TP overlap",
              dict(attention="unfused", tp_overlap=0.0, grad_sync="per_step", dp_overlap=False, grad_bytes=4),
              {"attention": "--use-flash-attn is opt-in (store_true, arguments.py@285068c8, merged that day from "
                            "'tridao-flashattn'): by default CoreAttention materialises the scores (FusedScaleMaskSoftmax); "
                            "validate gives FlashAttention to rows that name --use-flash-attn",
               "tp_overlap": "--tp-comm-overlap did not exist before Transformer Engine userbuffers (2023)",
               "grad_sync": _LOCAL_DDP, "dp_overlap": _LOCAL_DDP, "grad_bytes": _LOCAL_DDP}),
    Framework("megatron-deepspeed", "Megatron-DeepSpeed (BLOOM, MT-NLG era, 2021-2022): DeepSpeed pipeline "
              "engine, ZeRO-1, unfused attention",
              dict(attention="unfused", tp_overlap=0.0, dp_overlap=False, param_gather_overlap=False,
                   pp_scatter_gather=True, grad_bytes=2, pp_blocking_p2p=True, bf16_optimizer=True,
                   layer_microbatch_overhead_s=_DS_LAYER_OVERHEAD_S),
              {"attention": _OLD_ATTN, "tp_overlap": _NO_TP_OVERLAP, "dp_overlap": _DS_REDUCE,
               "param_gather_overlap": _DS_GATHER, "grad_sync": _DS_PIPE, "pp_scatter_gather": _DS_P2P,
               "pp_blocking_p2p": _DS_BLOCKING, "bf16_optimizer": _DS_BF16,
               "layer_microbatch_overhead_s": _DS_LAYER_OVERHEAD, "grad_bytes": _DS_COMM_DTYPE},
              pipeline_switches=_DS_PIPE_SWITCHES),
    Framework("megatron-deepspeed-habana", "Habana's Megatron-DeepSpeed fork on Gaudi (MLPerf GPT-3): the "
              "DeepSpeed pipeline engine as above, with fused SDPA attention, run as HPU lazy-mode graphs",
              dict(attention="flash", tp_overlap=HPU_ASYNC_TP_HIDDEN, dp_overlap=False, param_gather_overlap=False,
                   pp_scatter_gather=True, grad_bytes=2, pp_blocking_p2p=True, bf16_optimizer=True,
                   layer_microbatch_overhead_s=0.0, bf16_head=True),
              {"attention": _HPU_SDPA, "bf16_head": _HPU_BF16_HEAD, "tp_overlap": f"{_HPU_ASYNC_TP}; {_HPU_NO_SP}",
               "dp_overlap": _DS_REDUCE, "param_gather_overlap": _DS_GATHER, "grad_sync": _DS_PIPE,
               "pp_scatter_gather": _DS_P2P, "pp_blocking_p2p": _DS_BLOCKING, "bf16_optimizer": _DS_BF16,
               "layer_microbatch_overhead_s": _HPU_NO_LAYER_OVERHEAD, "grad_bytes": _DS_COMM_DTYPE},
              pipeline_switches=_DS_PIPE_SWITCHES),
    Framework("deepspeed", "DeepSpeed ZeRO (engine without pipeline): reduce at the boundary (ZeRO-1), every "
              "micro-batch with overlap_comm (ZeRO-2), per-submodule fetch (ZeRO-3)",
              dict(dp_overlap=False, param_gather_overlap=False, zero3_unit="weight", grad_bytes=2, pp_blocking_p2p=True),
              {"dp_overlap": _DS_REDUCE, "param_gather_overlap": _DS_GATHER, "grad_bytes": _DS_COMM_DTYPE,
               "pp_blocking_p2p": _DS_BLOCKING, "bf16_optimizer": _DS_BF16,
               "zero3_reuse_distance": _DS3_KEEP,
               "zero3_grad_overlap": "overlap_comm defaults to true at stage 3 (runtime/zero/config.py "
                                     "ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT, since ZeRO-3's release 599258f97, "
                                     "2021-03): gathers and reduce-scatters on their own streams (stage3.py@v0.3.13)",
               "zero3_unit": "DeepSpeed ZeRO-3 fetches parameters per submodule (runtime/zero/partitioned_param_"
                             "coordinator.py)", "grad_sync": _DS_PIPE},
              pipeline_switches=_DS_PIPE_SWITCHES,
              zero_switches={2: dict(dp_overlap=True),
                             3: dict(dp_overlap=True, zero3_grad_overlap=True, zero3_reuse_distance=_DS3_REUSE)}),
    Framework("fsdp", "PyTorch FSDP / FSDP2: reduce-scatter every micro-batch, block-wise prefetch",
              dict(grad_sync="auto", dp_overlap=True, zero3_unit="layer", attention="flash2"),
              {"grad_sync": _FSDP, "dp_overlap": _FSDP, "zero3_unit": _FSDP, "attention": _PT_FA2}),
    Framework("torchtitan", "torchtitan (2024-25): FSDP2 per block (+ TP, PP, CP), PyTorch SDPA attention",
              dict(grad_sync="auto", dp_overlap=True, zero3_unit="layer", attention="flash2",
                   fp8_scaling="torchao-tensorwise", cp_rotate="allgather", gqa_repeat_kv=True,
                   fsdp2_copies=True, adam_foreach=True, eager_fp32_loss=True, complex_rope=True,
                   fsdp2_keep_unsharded=True),
              {"grad_sync": _FSDP, "dp_overlap": _FSDP, "zero3_unit": _FSDP,
               "cp_rotate": "torchtitan config_manager.py --experimental.context_parallel_rotate_method defaults to "
                            "'allgather' (@9dec370ad26b), set by utils.py create_context_parallel_ctx on torch's "
                            "experimental context_parallel (tensor/experimental/_attention.py _AllGatherRotater)",
               "gqa_repeat_kv": "torchtitan models/llama/model.py (@9dec370ad26b): repeat_kv expands K/V to the "
                                "query heads before F.scaled_dot_product_attention",
               "fsdp2_copies": "torchtitan applies FSDP2 (fully_shard, parallelize_llama.py apply_fsdp); FSDP2's "
                               "all-gather copy-out and gradient copy-in run on the compute stream "
                               "(fsdp/_fully_shard/_fsdp_collectives.py foreach_all_gather_copy_out, foreach_reduce)",
               "fsdp2_keep_unsharded": "torchtitan parallelize_llama.py apply_fsdp (@9dec370ad26b): the last "
                                       "block with reshard_after_forward=False, activation checkpointing applied "
                                       "inside each fully_shard unit (apply_ac before apply_fsdp); torch FSDP2 of "
                                       "2024 (_composable/fsdp/_fsdp_state.py _lazy_init: the root's "
                                       "post_forward_mesh_info = None whatever reshard_after_forward says; torch "
                                       "2.13 only when it is left None): the root is not resharded after forward, "
                                       "and its post-backward (reduce-scatter) runs in "
                                       "_root_post_backward_final_callback because its inputs (token ids) need no "
                                       "gradient",
               "adam_foreach": "torchtitan optimizer.py (@9dec370ad26b): AdamW with fused=--optimizer.fused (default "
                               "False) and foreach=not fused",
               "complex_rope": "torchtitan models/llama/model.py apply_rotary_emb (@9dec370ad26b): view_as_complex "
                               "and a complex multiply, which inductor leaves to ATen ('Torchinductor does not "
                               "support code generation for complex operators', torch/_inductor/lowering.py)",
               "eager_fp32_loss": "torchtitan train.py loss_fn (@9dec370ad26b): cross_entropy(pred.flatten(0, 1)"
                                  ".float(), ...), left uncompiled ('compiling loss function causes CUDA errors')",
               "fp8_scaling": "torchtitan's --float8 swaps nn.Linear for torchao Float8Linear (float8.py), "
                              "dynamic tensorwise scaling by default (torchao float8/config.py)",
               "attention": "PyTorch SDPA's flash backend is FlashAttention-2 (integrated in PyTorch 2.2); "
                            "torchtitan's Llama calls F.scaled_dot_product_attention (models/llama/model.py)"}),
    Framework("llama3", "Meta's Llama 3 405B stack (PyTorch FSDP + TP/PP/CP, NCCLX): FSDP overlapped, "
              "all-gather context parallelism", dict(grad_sync="auto", dp_overlap=True, zero3_unit="layer",
                                                     cp_rotate="allgather-exposed", attention="flash2"),
              {"grad_sync": _LLAMA3_FSDP, "dp_overlap": _LLAMA3_FSDP, "zero3_unit": _FSDP, "cp_rotate": _LLAMA3_CP,
               "attention": _PT_FA2}),
    Framework("jax-xla", "JAX/XLA (MaxText, Paxml): no TP overlap, FSDP overlapped by the scheduler",
              dict(tp_overlap=0.0, dp_overlap=True, zero3_unit="layer"),
              {"tp_overlap": _XLA, "dp_overlap": _XLA, "zero3_unit": _XLA}),
    Framework("megascale", "MegaScale (ByteDance, NSDI'24): fused TP communication, overlapped DP",
              dict(tp_overlap=0.8, grad_sync="per_step", dp_overlap=True, attention="flash2"),
              {"tp_overlap": _MEGASCALE, "grad_sync": _MEGASCALE, "dp_overlap": _MEGASCALE,
               "attention": _MEGASCALE_FA2}),
)}


# Megatron-LM's --overlap-grad-reduce landed in commit 2d5220a424 (2023-08-16); before it the
# default 'local' DDP reduced gradients after the backward (profile "megatron-lm-2023")
OVERLAP_GRAD_REDUCE_DATE = (2023, 8, 16)


def before_overlap_grad_reduce(framework_text: str | None) -> bool:
    """Whether the framework text dates itself (YYYY-MM-DD, a commit's date) before 2023-08-16."""
    d = re.search(r"(20\d\d)[-_/. ](\d\d)[-_/. ](\d\d)", str(framework_text or ""))  # 2023-01-11, 2023_01_11
    return d is not None and tuple(int(g) for g in d.groups()) < OVERLAP_GRAD_REDUCE_DATE


def framework(name: str, field_name: str = "--framework") -> Framework:
    try:
        return PROFILES[name]
    except KeyError:
        raise SpecError(field_name, " | ".join(PROFILES), name) from None


def family_of(framework_text: str | None, zero_text: str | None = None) -> str | None:
    """The profile a published run's framework text names (None: not recognised, validate then prices
    with plain Options() -- the PyTorch-DDP-like defaults, docs/plan.md "Reading published rows").
    `zero_text` (the row's zero_or_fsdp) decides DeepSpeed-vs-Megatron readings and, when the framework
    text names no stack ("PyTorch 2.1", "Composer", none), PyTorch FSDP named by its sharding terms.
    Matched on whole words of the lower-cased text with `_`/`-` as spaces ("Megatron_Core", "NeMo-Megatron")."""
    fw = words(framework_text)
    zero = str(zero_text or "").lower()

    def has(pattern: str) -> bool:
        return re.search(pattern, fw) is not None

    if has(r"\bmega ?scale\b"):
        return "megascale"
    # Meta's NCCL fork, named by the Llama 3 report (s.3.3.3), or Meta's own Llama 3 stack named
    if has(r"\bncclx\b") or (has(r"\bmeta\b") and has(r"\bllama ?3")):
        return "llama3"
    if has(r"\bmlperf\b") and has(r"\bnemo|megatron core|\bmcore\b"):
        return "nemo-mlperf-rocm" if has(r"\brocm\b") else "nemo-mlperf"  # AMD's submission (frameworks above)
    if has(r"\bmindspeed"):
        return "mindspeed"
    # JAX/XLA stacks: MaxText, Pax(ml)/Praxis/Saxml, T5X, Levanter, EasyLM; GSPMD is XLA's partitioner
    if has(r"\b(?:maxtext|paxml|pax|praxis|jax|t5x|levanter|easylm|gspmd|xla)\b"):
        return "jax-xla"
    if has(r"\btorch ?titan\b"):
        return "torchtitan"
    if has(r"\bnemo|megatron core|\bmcore\b|\bm core\b|\bcore r?\d|megatron bridge|\bbridge\b"):
        return "megatron-core"
    if has(r"megatron deep ?speed|megatron ds\b|deep ?speed megatron"):
        return "megatron-deepspeed-habana" if has(r"\bhabana|\bgaudi") else "megatron-deepspeed"
    # both named as one stack ("DeepSpeed + Megatron-LM", "Megatron and DeepSpeed", MT-NLG's "Using
    # DeepSpeed and Megatron"), or DeepSpeed's pipeline engine named -- not "Megatron-LM / DeepSpeed"
    # (SC'21's table of alternatives: '/' reads as a space here, so the conjunction must be a word or sign)
    if has(r"deep ?speed\s*(?:\+|&|and|with)\s*megatron|megatron(?: lm)?\s*(?:\+|&|and|with)\s*deep ?speed") \
            or (has(r"deep ?speed") and has(r"\bpipeline") and "zero-3" not in zero):
        return "megatron-deepspeed"
    if has(r"deep ?speed") and (not has(r"megatron") or "deepspeed" in zero):
        return "deepspeed"
    # PyTorch FSDP, fairscale FSDP, metaseq/fairseq (OPT: fairscale FSDP; fairseq c10d DDP overlaps as FSDP does)
    if has(r"\b(?:fsdp2?|hsdp|metaseq|fairseq|fairscale|fully sharded)\b"):
        return "fsdp"
    if has(r"\bmegatron"):
        return "megatron-lm"  # published.framework_options takes megatron-lm-2021 for rows dated <= 2022
    # no stack named, but the sharding field names PyTorch FSDP by its own terms: torch's ShardingStrategy
    # values (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD; distributed/fsdp/api.py), FSDP/FSDP2/HSDP, "fully sharded"
    if re.search(r"\b(?:fsdp2?|hsdp|full shard|shard grad op|hybrid shard|fully sharded)\b", words(zero_text)):
        return "fsdp"
    return None
