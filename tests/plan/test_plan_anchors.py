"""Published runs outside calibration_runs.json's tokens/s rows (perf_anchors.md, collectives.md s.5).

These check trends and ranges, with the assumptions written next to each; the constants were not
tuned on MegaScale or the Megatron-Core H100 rows (Hopper GEMM efficiency was set from Llama 3 at
16k GPUs, see plan/efficiency.py, so that row is a consistency check, not a prediction).
"""

import statistics

from plan_calibration_rows import load_rows, row_cluster, row_model
from wanka.cluster import load_cluster
from wanka.layout import Layout
from wanka.plan import Options, estimate
from wanka.workload import load_model


def test_llama3_405b_mfu_falls_from_8k_to_16k_gpus():
    # Llama 3 paper Table 4: TP8 CP1 PP16, DP64 -> DP128, 16M-token batch: 43% -> 41% MFU
    m = load_model("llama3-405b")
    mfu = [estimate(m, load_cluster("meta-24k-h100", gpus=n), Layout.parse("tp=8,pp=16,vpp=4,gbs=2048")).mfu
           for n in (8192, 16384)]
    print("llama3-405b MFU 8k, 16k:", mfu)
    assert 0.36 <= mfu[1] < mfu[0] <= 0.50


def test_megascale_175b_trends():
    # MegaScale (NSDI'24) Table 2, 175B, TP8 PP8, batch 6144, 200 Gb/s per GPU, A100:
    # Megatron-LM 48.7% -> 41.2% MFU and MegaScale 59.1% -> 55.2% from 3,072 to 12,288 GPUs.
    m = load_model("gpt3-175b")
    megatron = Layout.parse("tp=8,pp=8,gbs=6144,sp=true")
    megascale = Layout.parse("tp=8,pp=8,vpp=6,gbs=6144,sp=true")  # interleaving + overlapped TP
    out = {}
    for n in (3072, 12288):
        c = load_cluster("bytedance-12k", gpus=n)
        out[n] = (estimate(m, c, megatron).mfu, estimate(m, c, megascale, options=Options(tp_overlap=0.8)).mfu)
    print("MegaScale 175B (megatron, megascale) MFU:", out)
    for n in out:
        assert out[n][1] > out[n][0]
    assert out[12288][0] < out[3072][0] and out[12288][1] < out[3072][1]
    assert 0.45 <= out[12288][1] <= 0.65 and 0.35 <= out[12288][0] <= 0.55


def test_megatron_core_h100_weak_scaling_rows():
    # calibration_runs.json mcore_h100_weak_*: MFU only, FFN/micro-batch/recompute unpublished.
    # Assumed: ffn 4h GELU (calibration.row_model), mbs 1, no recompute, ZeRO-1, half the TP
    # communication hidden (--tp-comm-overlap), BF16.
    errors = {}
    for row in load_rows():
        if not row["id"].startswith("mcore_h100_weak"):
            continue
        p = row["parallelism"]
        lay = Layout(tp=p["tp"], pp=p["pp"], dp=p["dp"], mbs=1, gbs=p["global_batch_size_seqs"], zero=1)
        e = estimate(row_model(row), row_cluster(row), lay, options=Options(tp_overlap=0.5))
        errors[row["id"]] = e.mfu * 100 / row["result"]["mfu_pct"] - 1
    for k, v in errors.items():
        print(f"{k:26s} {v:+.3f}")
    assert len(errors) == 9
    assert statistics.median(abs(v) for v in errors.values()) <= 0.15
