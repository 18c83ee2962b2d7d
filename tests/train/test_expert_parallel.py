"""Expert parallelism: tiny-moe with ep=2 (x dp, x pp) matches one process (fp32, same global
batch: losses and grad norms within 1e-4 relative), also in capacity-factor mode with bias
balancing; a rank killed under ep=2 resumes bit-identically; the routing knobs do what they say."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from wanka.errors import SpecError
from wanka.train.config import TrainConfig
from wanka.train.experts import Placement, imbalance
from wanka.model.moe import MoE
from wanka.train.trainer import Trainer
from wanka.workload.spec import load_model

WORKER = Path(__file__).with_name("dist_worker.py")
COMMON = {"model": "tiny-moe", "steps": 4, "seq_len": 64, "ckpt_every": 5}
RTOL = 1e-4
# The bias + EPLB run's gradient norm spikes to ~131 at its last step, where the sum over replicated experts'
# gradients in another order shows most: 2.2e-4 relative on an AMD EPYC with torch's AVX512 kernels (Dec 2026),
# below 1e-4 on the AVX2 machines before. The losses still agree to RTOL.
GRAD_RTOL_REPLICATED = 5e-4


def _metrics(ckpt) -> list[dict]:
    return [json.loads(l) for l in (Path(ckpt) / "metrics.jsonl").read_text().splitlines()]


def _one_process(corpus_dir, ckpt, **extra) -> list[dict]:
    cfg = TrainConfig(**{**COMMON, **extra}, ckpt=str(ckpt))
    Trainer(cfg, 0, 1, corpus_dir).fit()
    return _metrics(ckpt)


def _max_rel(run: list[dict], ref: list[dict], key: str) -> float:
    return max(abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(run, ref))


def _assert_same(run: list[dict], ref: list[dict], name: str = "") -> None:
    assert len(run) == len(ref) == COMMON["steps"]
    print(f"{name}: max relative difference loss {_max_rel(run, ref, 'loss'):.2e}, "
          f"grad norm {_max_rel(run, ref, 'grad_norm'):.2e}")
    assert [m["loss"] for m in run] == pytest.approx([m["loss"] for m in ref], rel=RTOL)
    assert [m["grad_norm"] for m in run] == pytest.approx([m["grad_norm"] for m in ref], rel=RTOL)
    assert [m["expert_load"] for m in run] == [m["expert_load"] for m in ref]  # same routing decisions


@pytest.mark.timeout(400)
def test_ep_layouts_match_one_process(corpus_dir, tmp_path):
    mb1 = "precision=fp32,gbs=4,mbs=1"
    configs = [
        {"layout": f"dp=4,ep=2,{mb1}", "ckpt": str(tmp_path / "ep2dp2")},              # expert-dp = 2
        {"layout": f"pp=2,dp=2,ep=2,{mb1}", "ckpt": str(tmp_path / "pp2ep2")},         # EP inside each stage
        {"layout": f"dp=4,ep=2,{mb1}", "ckpt": str(tmp_path / "capacity"), "moe_capacity_factor": 1.0,
         "moe_bias_rate": 0.01},
    ]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", str(WORKER),
           str(tmp_path / "out.json"), str(corpus_dir)] + [json.dumps({**COMMON, **c}) for c in configs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ref = _one_process(corpus_dir, tmp_path / "ref", layout=mb1)
    _assert_same(_metrics(tmp_path / "ep2dp2"), ref, "dp=4,ep=2")
    _assert_same(_metrics(tmp_path / "pp2ep2"), ref, "pp=2,dp=2,ep=2")
    capped_ref = _one_process(corpus_dir, tmp_path / "ref_cap", layout=mb1, moe_capacity_factor=1.0,
                              moe_bias_rate=0.01)
    capped = _metrics(tmp_path / "capacity")
    _assert_same(capped, capped_ref, "dp=4,ep=2 capacity 1.0 + bias")
    assert all(m["moe_dropped"] > 0 for m in capped)  # capacity 1.0 on a skewed router drops pairs
    assert [m["loss"] for m in capped] != pytest.approx([m["loss"] for m in ref], rel=1e-6)


@pytest.mark.timeout(300)
def test_ep2_matches_one_process_and_a_killed_rank_resumes_bit_identically(run_json, corpus_dir, tmp_path):
    # EPLB re-places (and replicates) experts at every checkpoint: the kill at step 5 resumes from
    # step 3's checkpoint, whose placement differs from the initial one
    args = ["--nproc", "2", "--model", "tiny-moe", "--layout", "ep=2,precision=fp32,gbs=4,mbs=2", "--seq-len", "64",
            "--steps", "8", "--ckpt-every", "3", "--moe-bias-rate", "0.01", "--moe-redundant-experts", "2",
            "--data", str(corpus_dir)]
    clean = run_json("train", *args, "--ckpt", str(tmp_path / "clean"))
    faulty = run_json("train", *args, "--ckpt", str(tmp_path / "faulty"), "--inject", "kill@step=5,rank=1")
    assert clean["restarts"] == 0 and faulty["restarts"] == 1
    assert faulty["final_loss"] == clean["final_loss"]
    assert faulty["params_sha256"] == clean["params_sha256"]  # experts of both EP ranks and the biases restored
    events = [json.loads(l) for l in (tmp_path / "faulty" / "events.jsonl").read_text().splitlines()]
    rebalances = [e for e in events if e["event"] == "expert_rebalance"]
    assert rebalances and rebalances[0]["changed"]
    assert any(len(set(sum(p, []))) < len(sum(p, [])) for p in rebalances[0]["placements"].values())  # replicas
    cfg = TrainConfig(**{**COMMON, "steps": 8, "ckpt_every": 3}, layout="precision=fp32,gbs=4,mbs=2",
                      moe_bias_rate=0.01, ckpt=str(tmp_path / "one"))
    one = Trainer(cfg, 0, 1, corpus_dir)
    one.fit()
    ep2 = _metrics(tmp_path / "clean")  # replicated experts' gradients summed: the same training
    one_metrics = _metrics(cfg.ckpt)
    print(f"ep=2 (bias + EPLB): max relative difference loss {_max_rel(ep2, one_metrics, 'loss'):.2e}, "
          f"grad norm {_max_rel(ep2, one_metrics, 'grad_norm'):.2e}")
    assert [m["loss"] for m in ep2] == pytest.approx(one.losses, rel=RTOL)
    assert [m["grad_norm"] for m in ep2] == pytest.approx([m["grad_norm"] for m in _metrics(cfg.ckpt)],
                                                          rel=GRAD_RTOL_REPLICATED)


def _moe(seed=0) -> MoE:
    torch.manual_seed(seed)
    return MoE(load_model("tiny-moe"))


def test_bias_changes_selection_not_gating_weights():
    moe, x = _moe(), torch.randn(64, 128)
    with torch.no_grad():
        base = moe(x)
        top_i = torch.softmax(moe.router(x), -1).topk(2, -1).indices
        hot = int(top_i.flatten().bincount(minlength=4).argmax())
        moe.expert_bias[hot] = -10.0  # never selected now
        moe.load.zero_()
    with torch.enable_grad():
        steered = moe(x).detach()
    assert moe.load[hot] == 0 and moe.load.sum() == 64 * 2
    untouched = ~(top_i == hot).any(-1)  # tokens that never chose the hot expert
    assert 0 < int(untouched.sum()) < 64
    # their gating weights are the plain probabilities still: bit-identical outputs
    assert torch.equal(steered[untouched], base[untouched])
    assert not torch.allclose(steered[~untouched], base[~untouched])


def test_capacity_keeps_the_most_probable_pairs():
    moe, x = _moe(), torch.randn(64, 128)
    moe.capacity_factor = 0.5  # capacity = ceil(0.5 * 64 * 2 / 4) = 16 pairs per expert
    with torch.enable_grad():
        moe(x)
    probs = torch.softmax(moe.router(x), -1).detach()
    top_i = probs.topk(2, -1).indices
    w = probs.gather(-1, top_i)
    keep = moe._keep_mask(top_i, w / w.sum(-1, keepdim=True))
    for e in range(4):
        sel = top_i == e
        assert int((sel & keep).sum()) == min(16, int(sel.sum()))
        if int(sel.sum()) > 16:
            assert (w / w.sum(-1, keepdim=True))[sel & keep].min() >= (w / w.sum(-1, keepdim=True))[sel & ~keep].max()
    assert moe.dropped == int((~keep).sum()) > 0


def test_placement_and_imbalance():
    p = Placement.contiguous(8, 4)
    assert p.ranks == ((0, 1), (2, 3), (4, 5), (6, 7))
    load = torch.tensor([[8.0, 0, 1, 1, 1, 1, 2, 2]])
    assert imbalance(load, p) == pytest.approx(8 / 4)  # rank loads 8, 2, 2, 4: max/mean = 8/4
    replicated = Placement.from_lists([[0, 1, 2], [0, 3, 4], [5, 6, 7]])
    assert replicated.replicated() == [0]
    assert replicated.rank_loads(load).tolist() == [[5.0, 6.0, 5.0]]  # expert 0 split over its 2 replicas
    with pytest.raises(ValueError):
        Placement.from_lists([[0, 1], [2, 3], [4, 5], [6, 6]]).route_table(8)  # expert 7 nowhere


def test_ep_layouts_are_validated():
    from wanka.train.parallel_dims import ParallelDims

    spec = load_model("tiny-moe")
    dims = ParallelDims.from_layout("dp=4,ep=2", 4, spec)
    assert (dims.ep, dims.expert_dp, [dims.ep_rank(r) for r in range(4)]) == (2, 2, [0, 1, 0, 1])
    with pytest.raises(SpecError, match="ep"):
        ParallelDims.from_layout("dp=2,ep=3", 2, spec)
    with pytest.raises(SpecError, match="ep"):
        ParallelDims.from_layout("dp=2,ep=2", 2, load_model("tiny"))
    with pytest.raises(SpecError, match="moe-capacity-factor"):
        TrainConfig(moe_capacity_factor=0)
