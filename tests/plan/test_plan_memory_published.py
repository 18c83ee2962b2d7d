"""Memory of published layouts that really ran must fit in the GPUs they ran on.

Each layout is the published one; only what the source states is set. Mechanisms involved
(docs/plan.md "Memory"): activations in flight per pipeline rank (Megatron-Core schedule warm-up,
capped at the step's micro-batches), the uneven first/last stage split, ZeRO-2 gradient sharding,
FP8 activation caching and DeepSeek-V3's selective recompute.
"""

import pytest

from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan import Options, estimate
from wanka.plan.memory import memory_per_gpu, stage_layers
from wanka.workload import load_model
from wanka.workload.activations import layer_activations


@pytest.fixture(scope="module")
def llama3_405b():
    # Llama 3 paper (arXiv:2407.21783) s.3.3.2 and Table 4: 16,384 H100 80GB, TP8 CP1 PP16 DP128,
    # 8,192-token sequences, 16M-token batch (2,048 sequences, 16 per DP rank: mbs 1, 16 micro-batches),
    # interleaved pipeline (V not published: vpp=4 here), no activation checkpointing at 8K, FSDP that
    # "shards the optimizer states and gradients" but does not reshard parameters after forward
    # (= zero=2), one layer removed from the first and the last pipeline stage.
    model = load_model("llama3-405b")
    cluster = load_cluster("meta-24k-h100", gpus=16384)
    return model, cluster, Layout.parse("tp=8,pp=16,vpp=4,mbs=1,gbs=2048,zero=2,recompute=none")


def test_llama3_405b_published_layout_fits_in_80GB(llama3_405b):
    model, cluster, lay = llama3_405b
    est = estimate(model, cluster, lay)
    print(f"llama3-405b tp8 pp16 dp128 zero2: {est.memory_GB_per_gpu:.1f} GiB {est.memory}, MFU {est.mfu:.3f}")
    assert est.fits and est.memory_GB_per_gpu <= 80
    assert est.memory_GB_per_gpu > 60  # no slack to spare: activations of 16 micro-batches x 8 layers
    assert 0.36 <= est.mfu <= 0.46  # published 38-41% at 16k GPUs (Table 4)


def test_llama3_405b_pipeline_split_is_metas(llama3_405b):
    model, _, lay = llama3_405b
    split = [sum(stage_layers(model, lay.pp, i)) for i in range(lay.pp)]
    assert split == [7] + [8] * 14 + [7]


def test_llama3_405b_interleaving_cannot_keep_more_than_the_steps_microbatches(llama3_405b):
    # m = pp = 16: every forward of the step is in flight whatever vpp (Megatron-Core warm-up
    # 2(pp-1-r) + (vpp-1)pp >= m*vpp), so vpp 1, 2, 4 hold the same activations on rank 1
    model, cluster, _ = llama3_405b
    acts = [memory_per_gpu(model, Layout.parse(f"tp=8,pp=16,vpp={v},gbs=2048,zero=2").resolve(cluster.gpus),
                           model.seq_len).activations_GiB for v in (2, 4)]
    assert acts[0] == pytest.approx(acts[1])
    one_layer = layer_activations(model, 1, model.seq_len).stored(8, True, "none")
    assert acts[0] == pytest.approx(16 * 8 * one_layer / 2**30, rel=1e-9)


def test_llama3_405b_with_megatron_distributed_optimizer_does_not_fit(llama3_405b):
    # ZeRO-1 keeps a full fp32 gradient buffer (4 B/param, ~12 GiB here): the reason Meta's FSDP
    # sharding of gradients mattered
    model, cluster, lay = llama3_405b
    est = estimate(model, cluster, Layout.parse("tp=8,pp=16,vpp=4,mbs=1,gbs=2048,zero=1"))
    assert not est.fits and est.memory["gradients"] > 10


@pytest.fixture(scope="module")
def deepseek_v3():
    # DeepSeek-V3 (arXiv:2412.19437) s.3.2: 2,048 H800 (80 GB), PP16, EP64 over 8 nodes, ZeRO-1,
    # no TP; s.3.2.3: RMSNorm and MLA up-projection recomputed in backward; s.3.3.2: FP8 GEMMs,
    # activations cached in FP8, only the MoE SwiGLU inputs cached (output recomputed);
    # s.4.2: 4K sequences, batch 15,360. Micro-batch size not published: 1 here. Not modelled:
    # DualPipe (2x parameters, PP+1 micro-batches in flight), the MTP module, E5M6 attention output.
    model = load_model("deepseek-v3")
    cluster = load_cluster("wanka-10k", gpus=2048)  # 10,240 H800, 8 per node, 400 Gb/s IB per GPU
    opts = Options(recompute_modules=("layernorm", "mla_up_proj", "moe_act"))
    return model, cluster, Layout.parse("pp=16,ep=64,mbs=1,gbs=15360,zero=1,precision=fp8,recompute=selective"), opts


def test_deepseek_v3_published_layout_fits_in_80GB(deepseek_v3):
    model, cluster, lay, opts = deepseek_v3
    est = estimate(model, cluster, lay, options=opts)
    plain = estimate(model, cluster, Layout.parse("pp=16,ep=64,mbs=1,gbs=15360,zero=1,precision=fp8"))
    print(f"deepseek-v3 pp16 ep64 fp8: {est.memory_GB_per_gpu:.1f} GiB with DeepSeek's recompute and FP8 "
          f"caching, {plain.memory_GB_per_gpu:.1f} GiB without; {est.tokens_per_s_per_gpu:.0f} tok/s/GPU")
    assert est.fits and est.memory_GB_per_gpu <= 80
    # with the same layout but no recompute the activations alone exceed the HBM
    assert not plain.fits and plain.memory["activations"] > 1.5 * est.memory["activations"]
    # recomputing norms and up-projections costs a little time, far less than full recompute
    full = estimate(model, cluster, Layout.parse("pp=16,ep=64,mbs=1,gbs=15360,zero=1,precision=fp8,recompute=full"))
    assert est.breakdown["recompute"] < 0.25 * full.breakdown["recompute"]
    assert est.tokens_per_s_per_gpu > full.tokens_per_s_per_gpu


def test_fp8_activation_cache_is_what_shrinks_deepseek(deepseek_v3):
    model, cluster, lay, opts = deepseek_v3
    r = lay.resolve(cluster.gpus, model)
    on = memory_per_gpu(model, r, model.seq_len, "flash", opts.recompute_modules, True)
    off = memory_per_gpu(model, r, model.seq_len, "flash", opts.recompute_modules, False)
    assert off.activations_GiB > 1.3 * on.activations_GiB


def test_deepseek_v3_with_dualpipe_still_fits_and_hides_the_all_to_all(deepseek_v3):
    # DeepSeek-V3 s.3.2.1 Table 2: DualPipe keeps 2x the parameters and PP+1 micro-batches of
    # activations, hides the EP all-to-all and PP transfers, bubble (PP/2-1)(F&B + B - 3W);
    # s.3.2.2: 20 of 132 SMs run the communication kernels.
    from dataclasses import replace

    model, cluster, lay, opts = deepseek_v3
    one_f_one_b = estimate(model, cluster, lay, options=opts)
    dual = estimate(model, cluster, lay, options=replace(opts, pipeline="dualpipe", comm_sm_fraction=20 / 132))
    print(f"deepseek-v3 DualPipe: {dual.memory_GB_per_gpu:.1f} GiB, {dual.tokens_per_s_per_gpu:.0f} tok/s/GPU "
          f"(1F1B, all-to-all exposed: {one_f_one_b.tokens_per_s_per_gpu:.0f}; published run-level ~1,540)")
    assert dual.fits and dual.memory_GB_per_gpu > one_f_one_b.memory_GB_per_gpu
    assert dual.memory["weights"] == pytest.approx(2 * one_f_one_b.memory["weights"], rel=0.1)
    assert dual.breakdown["ep_comm"] == 0 and dual.breakdown["pipeline_bubble"] < one_f_one_b.breakdown["pipeline_bubble"]
    assert dual.tokens_per_s_per_gpu > one_f_one_b.tokens_per_s_per_gpu
