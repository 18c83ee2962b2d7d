"""Checkpoints on one process (no torchrun): commit, integrity fallback, partial saves, keep-K,
async snapshot, export to the serving contract, NaN rollback."""

import json

import pytest
import torch
from safetensors.torch import load_file

from wanka.errors import SpecError
from wanka.train import checkpoint as ck
from wanka.train.config import TrainConfig
from wanka.train.export import export
from wanka.train.trainer import Trainer
from wanka.workload.spec import load_model

BASE = dict(model="tiny", layout="precision=fp32,gbs=2,mbs=1", seq_len=32, ckpt_every=2)


def _trainer(corpus_dir, ckpt, **kw):
    return Trainer(TrainConfig(**{**BASE, "ckpt": str(ckpt), **kw}), 0, 1, corpus_dir)


def test_resume_is_exact_and_keep_k(corpus_dir, tmp_path):
    full = _trainer(corpus_dir, tmp_path / "a", steps=6, keep=2)
    ref = full.fit()
    assert [s for s, _ in ck.committed(tmp_path / "a")] == [6, 4]  # keep 2
    part = _trainer(corpus_dir, tmp_path / "b", steps=4)
    part.fit()
    resumed = _trainer(corpus_dir, tmp_path / "b", steps=6)
    out = resumed.fit()
    assert resumed.losses == full.losses[4:]
    assert out["params_sha256"] == ref["params_sha256"]
    again = _trainer(corpus_dir, tmp_path / "b", steps=6).fit()  # already finished: nothing to train
    assert again["final_loss"] == out["final_loss"] and again["params_sha256"] == out["params_sha256"]


def test_corrupt_newest_falls_back_and_partial_is_ignored(corpus_dir, tmp_path):
    _trainer(corpus_dir, tmp_path, steps=4).fit()
    (tmp_path / "step_00000006.tmp").mkdir()  # a save that died before commit
    (tmp_path / "step_00000006.tmp" / ".metadata").write_bytes(b"junk")
    assert ck.latest_valid(tmp_path, log=lambda _: None)[0] == 4
    victim = next((tmp_path / "step_00000004").glob("*.distcp"))
    victim.write_bytes(victim.read_bytes()[:-1] + b"X")
    seen = []
    assert ck.latest_valid(tmp_path, log=seen.append)[0] == 2
    assert "checksum mismatch" in seen[0]["reason"]
    t = _trainer(corpus_dir, tmp_path, steps=4)
    assert t.restore() and t.step == 2 and t.sampler.state.next_batch == 2
    (tmp_path / "step_00000002" / "manifest.json").unlink()
    assert ck.latest_valid(tmp_path, log=lambda _: None) is None


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_async_save_snapshots_before_the_weights_change(corpus_dir, tmp_path):
    t = _trainer(corpus_dir, tmp_path, steps=1, async_ckpt=True)
    before = {k: v.clone() for k, v in t.par.chunks[0].state_dict().items()}
    t.save()
    with torch.no_grad():
        for p in t.params:
            p.add_(1.0)  # the optimizer step that follows a save
    t.ckpt.wait()
    _, params = __import__("wanka.train.export", fromlist=["x"]).load_params(tmp_path / "step_00000000")
    assert all(torch.equal(params[k], before[k]) for k in params)


def test_export_writes_the_serving_contract(corpus_dir, tmp_path):
    result = _trainer(corpus_dir, tmp_path / "ck", steps=2).fit()
    out = export(tmp_path / "ck", tmp_path / "exp")
    config = json.loads((tmp_path / "exp" / "config.json").read_text())
    assert config["format"] == "wanka-export-v1" and config["dtype"] == "float32" and config["step"] == 2
    assert config["model"]["name"] == "tiny" and config["model"]["seq_len"] == 32
    assert config["params_sha256"] == result["params_sha256"] == out["params_sha256"]
    tensors = load_file(str(tmp_path / "exp" / "model.safetensors"))
    assert tensors["layers.0.attention.wk.weight"].shape == (64, 128)
    assert all(t.dtype == torch.float32 for t in tensors.values())
    assert json.loads((tmp_path / "exp" / "tokenizer.json").read_text())["type"] == "byte"
    with pytest.raises(SpecError, match="ckpt"):
        export(tmp_path / "nothing", tmp_path / "exp2")


def test_nan_rolls_back_skips_the_batch_and_lowers_lr(corpus_dir, tmp_path):
    t = _trainer(corpus_dir, tmp_path, steps=8, inject=["nan@step=5", "nan@step=7"])
    t.fit()
    events = [json.loads(l) for l in (tmp_path / "events.jsonl").read_text().splitlines()]
    spikes = [e for e in events if e["event"] == "loss_spike"]
    assert [s["batch"] for s in spikes] == [5, 7]
    assert spikes[0]["rolled_back_to"] == 4 and spikes[0]["lr_scale"] == 1.0
    assert spikes[1]["rolled_back_to"] == 6 and spikes[1]["lr_scale"] == 0.5
    metrics = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    batches = [m["batch"] for m in metrics if m["step"] > 6]
    assert batches == [8, 9] and t.step == 8 and t.losses[-1] == t.losses[-1]  # finite


def test_ckpt_dir_of_another_model_is_refused_up_front(one_step_ckpt):
    ck.check_ckpt_dir(one_step_ckpt, load_model("tiny", seq_len=64))  # same architecture: resumable
    with pytest.raises(SpecError, match="moe") as info:
        ck.check_ckpt_dir(one_step_ckpt, load_model("tiny-moe"))
    assert info.value.field == "ckpt"
