"""torchrun elastic recovery through `wanka train`: a killed rank, a rank killed while saving,
and a corrupted newest checkpoint all end with the uninterrupted run's loss and params_sha256."""

import json

import pytest

from wanka.train.fault import Injection, SpikeDetector, stragglers
from wanka.errors import SpecError

ARGS = ["--nproc", "2", "--layout", "dp=2,precision=fp32,gbs=4,mbs=2", "--seq-len", "64", "--steps", "20",
        "--ckpt-every", "5"]


@pytest.mark.timeout(240)
def test_kills_and_corruption_recover_exactly(run_json, corpus_dir, tmp_path):
    clean = run_json("train", *ARGS, "--data", str(corpus_dir), "--ckpt", str(tmp_path / "clean"))
    assert clean["restarts"] == 0 and clean["steps"] == 20
    faulty = run_json("train", *ARGS, "--data", str(corpus_dir), "--ckpt", str(tmp_path / "faulty"),
                      "--inject", "kill-in-save@step=10,rank=0",      # dies before commit: step 10 ignored
                      "--inject", "corrupt-checkpoint@step=15",       # newest checkpoint corrupt ...
                      "--inject", "kill@step=17,rank=1")              # ... when this kill forces a reload
    assert faulty["restarts"] == 2
    assert faulty["final_loss"] == clean["final_loss"]
    assert faulty["params_sha256"] == clean["params_sha256"]
    events = [json.loads(l) for l in (tmp_path / "faulty" / "events.jsonl").read_text().splitlines()]
    restored = [e["step"] for e in events if e["event"] == "restored"]
    assert restored == [5, 10]  # 10.tmp was never committed; 15 failed its checksum
    assert any(e["event"] == "checkpoint_invalid" and "step_00000015" in e["path"] for e in events)
    metrics = [json.loads(l) for l in (tmp_path / "faulty" / "metrics.jsonl").read_text().splitlines()]
    assert {m["step"] for m in metrics} == set(range(1, 21))
    assert all(k in metrics[-1] for k in ("loss", "grad_norm", "lr", "step_time_s", "tokens_per_s", "mfu", "memory_MB"))


def test_injection_specs_are_validated():
    assert Injection.parse("kill@step=30,rank=1") == Injection("kill", 30, 1)
    assert str(Injection.parse("nan@step=3")) == "nan@step=3"
    for bad in ("explode@step=1", "kill@rank=1", "kill@step=x", "kill@step=1,node=2"):
        with pytest.raises(SpecError, match="inject"):
            Injection.parse(bad)


def test_spike_detector_and_stragglers():
    det = SpikeDetector(factor=3.0, warmup=3)
    for loss in (4.0, 3.9, 3.8, 3.7):
        assert det.is_bad(loss) is None
        det.update(loss)
    assert det.is_bad(20.0).startswith("loss spike")
    assert det.is_bad(float("nan")) == "non-finite loss"
    assert det.is_bad(5.0) is None
    assert stragglers([1.0, 1.1, 0.9, 2.5]) == [3]
    assert stragglers([1.0, 1.1, 0.9, 1.2]) == []


@pytest.mark.timeout(180)
def test_hang_hits_the_collective_timeout_and_a_straggler_is_logged(run_json, corpus_dir, tmp_path):
    out = run_json("train", "--nproc", "2", "--layout", "dp=2,precision=fp32,gbs=4,mbs=2", "--seq-len", "64",
                   "--steps", "6", "--ckpt-every", "2", "--data", str(corpus_dir), "--ckpt", str(tmp_path),
                   "--collective-timeout", "8", "--inject", "slow@step=2,rank=1", "--inject", "hang@step=5,rank=1")
    assert out["restarts"] == 1 and out["steps"] == 6
    events = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["event"] == "restored"] == [4]
    stragglers_seen = [e for e in events if e["event"] == "straggler"]
    assert stragglers_seen and stragglers_seen[0]["step"] == 2 and stragglers_seen[0]["ranks"] == [1]
    assert "Timed out" in (tmp_path / "torchrun.log").read_text()
