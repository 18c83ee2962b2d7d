"""`wanka plan calibrate` on runs measured by real `wanka train` runs on this machine: it reads the
run directories, fits the GEMM multiplier, reports held-out error before and after, and writes a
profile the planner loads. Whether the held-out error falls depends on this machine's timing noise
(it fell 64.9% -> 44.6% in one run and rose 24.3% -> 40.1% in a CI run), so it is reported, not
asserted here; tests/plan/test_plan_calibrate_fit.py asserts the fit itself on runs priced with
known multipliers.

The cluster spec describes this machine as a user would before measuring anything: one 'GPU' per
training process with the datasheet peak of the one core it runs on (`wanka train` sets
OMP_NUM_THREADS=1): clock x FP32 FLOPs per cycle of its vector units (AVX-512: 2 FMA x 16 lanes x
2 = 64; AVX2 + FMA: 32; else 8), from /proc/cpuinfo, and 20 GB/s of memory bandwidth (an
assumption: one DDR channel's worth for one core). The planner's constants are GPU constants, so
the prior is far off; calibrating the GEMM efficiency on the other runs must predict each held-back
run better. One constant is fitted: this shared, loaded machine makes step times noisy, and two
constants from two runs would fit the noise.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wanka.cluster import load_cluster

CONFIGS = [  # (name, layers, hidden, ffn_hidden, seq_len, layout)
    ("cal-s", 2, 64, 192, 64, "mbs=2,gbs=4,precision=fp32"),
    ("cal-m", 2, 128, 384, 128, "mbs=4,gbs=8,precision=fp32"),
    ("cal-l", 4, 192, 512, 128, "mbs=4,gbs=8,precision=fp32"),
]
STEPS = 6


def core_peak_tflops() -> float:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    mhz = re.search(r"cpu MHz\s*:\s*([0-9.]+)", info)
    flags = set((re.search(r"flags\s*:(.*)", info) or re.match("()", "")).group(1).split())
    per_cycle = 64 if "avx512f" in flags else (32 if {"avx2", "fma"} <= flags else 8)
    return (float(mhz.group(1)) if mhz else 2500.0) * 1e6 * per_cycle / 1e12


@pytest.fixture(scope="session")
def measured(tmp_path_factory):
    """Three tiny `wanka train` runs (one process each) and a cluster spec for this machine."""
    from wanka.data.corpus import write_corpus
    from wanka.data.pipeline import prepare

    root = tmp_path_factory.mktemp("calibrate")
    shards = root / "shards"
    prepare(write_corpus(root / "text", n_sentences=2000), shards)
    runs = root / "runs"
    for name, layers, hidden, ffn, seq, layout in CONFIGS:
        spec = root / f"{name}.yaml"
        spec.write_text(yaml.safe_dump({"name": name, "layers": layers, "hidden": hidden, "heads": 4, "kv_heads": 2,
                                        "ffn_hidden": ffn, "vocab": 512, "seq_len": seq, "activation": "swiglu"}))
        done = subprocess.run([sys.executable, "-m", "wanka", "train", "--model", str(spec), "--data", str(shards),
                               "--layout", layout, "--steps", str(STEPS), "--ckpt", str(runs / name),
                               "--ckpt-every", "1000", "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    peak = core_peak_tflops()
    cluster = root / "this-machine.yaml"
    cluster.write_text(yaml.safe_dump({
        "name": "this-machine", "gpus": 1, "gpus_per_node": 1,
        "gpu": {"name": "cpu-host", "peak_tflops": {"fp32": peak, "tf32": peak, "bf16": peak},
                "hbm_GB": 16, "hbm_TBps": 0.02},
        "scale_up": {"domain": 1, "bandwidth_GBps": 10}, "scale_out": {"bandwidth_Gbps": 10, "topology": "fat-tree"}}))
    return runs, cluster


def test_calibration_on_real_train_runs_writes_a_loadable_profile(measured, run_cli, tmp_path):
    runs, cluster = measured
    out = tmp_path / "this-machine-calibrated.yaml"
    code, stdout, err = run_cli("plan", "calibrate", "--runs", str(runs), "--cluster", str(cluster),
                                "--fit", "gemm", "--out", str(out), "--json")
    assert code == 0, err
    d = json.loads(stdout)
    assert d["runs"] == len(CONFIGS) and d["held_out"] == "leave-one-out" and not d["skipped"]
    assert 0 <= d["median_abs_error_after"] < float("inf") and 0 <= d["median_abs_error_before"] < float("inf")
    # The fitted number is a multiplier on the planner's GPU GEMM efficiency, so on a CPU core it may land
    # on either side of 1 (a CI run fitted 1.516); it must be a positive finite fit, and the
    # constant that was not asked for stays untouched.
    assert 0 < d["efficiency"]["gemm"] < float("inf")
    assert d["efficiency"]["hbm"] == 1.0
    profile = load_cluster(str(out))  # the profile is a cluster spec the planner and the twin load
    assert profile.gpu.efficiency_scale.gemm == pytest.approx(d["efficiency"]["gemm"])
    code, stdout, err = run_cli("plan", "--model", "llama3-8b", "--cluster", str(out), "--layout", "gbs=1", "--json")
    assert code == 0, err


def test_calibrate_refuses_more_constants_than_runs(measured, run_cli, tmp_path):
    runs, cluster = measured
    code, _, err = run_cli("plan", "calibrate", "--runs", str(runs / "cal-s"), "--cluster", str(cluster),
                           "--fit", "gemm,hbm", "--out", str(tmp_path / "p.yaml"))
    assert code == 2 and "at least 2 measured runs" in err and not (tmp_path / "p.yaml").exists()
