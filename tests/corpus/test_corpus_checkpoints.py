"""Checkpoints and exports from a real (one-step) training run, damaged the ways disks, copies and
people damage them: truncated, bytes flipped, files deleted, manifests broken, another model's
state. `wanka export` and `wanka serve` must refuse each with one line and write nothing;
`wanka train` must refuse a checkpoint directory of another model before it starts torchrun."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare
from wanka.train.config import TrainConfig
from wanka.train.export import export
from wanka.train.trainer import Trainer

from .conftest import Case

STEP = "step_00000001"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """(checkpoint root, export dir) of one real training step of the tiny model, made once."""
    root = tmp_path_factory.mktemp("real-run")
    shards = root / "shards"
    prepare(write_corpus(root / "text", n_sentences=300), shards)
    cfg = TrainConfig(model="tiny", layout="precision=fp32,gbs=2,mbs=1", seq_len=32, ckpt_every=1, steps=1,
                      ckpt=str(root / "ck"))
    Trainer(cfg, 0, 1, shards).fit()
    export(root / "ck", root / "exp")
    return root / "ck", root / "exp"


# ---- damage, each a function of the copied directory ----------------------------------------------
def truncate(rel: str, keep: float):
    def f(d: Path):
        p = d / rel
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * keep)])
    return f


def flip(rel: str, where: float = 0.5):
    def f(d: Path):
        p = d / rel
        data = bytearray(p.read_bytes())
        i = min(len(data) - 1, int(len(data) * where))
        data[i] ^= 0xFF
        p.write_bytes(bytes(data))
    return f


def delete(rel: str):
    return lambda d: (d / rel).unlink()


def write(rel: str, content: str | bytes):
    def f(d: Path):
        p = d / rel
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return f


def rehash(step_dir: Path) -> None:
    """Rewrite manifest.json so that its checksums match the (changed) files again: damage that a
    checksum cannot see, as when a tool rewrites a checkpoint."""
    manifest = json.loads((step_dir / "manifest.json").read_text())
    manifest["files"] = {rel: hashlib.sha256((step_dir / rel).read_bytes()).hexdigest() for rel in manifest["files"]}
    (step_dir / "manifest.json").write_text(json.dumps(manifest))


def edit_train_state(change, rehashed: bool = True):
    def f(d: Path):
        p = d / STEP / "train_state.json"
        state = json.loads(p.read_text())
        text = change(state)
        p.write_text(text if isinstance(text, str) else json.dumps(state))
        if rehashed:
            rehash(d / STEP)
    return f


def then_rehash(damage):
    def f(d: Path):
        damage(d)
        rehash(d / STEP)
    return f


def moe_spec(state):
    state["model_spec"].update(name="tiny-moe", moe={"experts": 4, "top_k": 2, "ffn_hidden": 128,
                                                     "shared_experts": 0, "dense_layers": 0})


def wider_spec(state):
    state["model_spec"]["hidden"] = 256


def spec_field(key, value):
    def change(state):
        state["model_spec"][key] = value
    return change


def drop(key):
    def change(state):
        del state[key]
    return change


def manifest(content: str):
    return write(f"{STEP}/manifest.json", content)


S = STEP
CKPT_DAMAGE = {
    "metadata-truncated": truncate(f"{S}/.metadata", 0.5),
    "metadata-flipped": flip(f"{S}/.metadata"),
    "metadata-deleted": delete(f"{S}/.metadata"),
    "metadata-empty": write(f"{S}/.metadata", b""),
    "shard-truncated-half": truncate(f"{S}/__0_0.distcp", 0.5),
    "shard-truncated-empty": truncate(f"{S}/__0_0.distcp", 0.0),
    "shard-flipped-start": flip(f"{S}/__0_0.distcp", 0.0),
    "shard-flipped-middle": flip(f"{S}/__0_0.distcp", 0.5),
    "shard-flipped-end": flip(f"{S}/__0_0.distcp", 1.0),
    "shard-deleted": delete(f"{S}/__0_0.distcp"),
    "train-state-flipped": flip(f"{S}/train_state.json", 0.1),
    "train-state-deleted": delete(f"{S}/train_state.json"),
    "rng-deleted": delete(f"{S}/rng/rank0.pt"),
    "manifest-deleted": delete(f"{S}/manifest.json"),
    "manifest-empty": manifest(""),
    "manifest-malformed": manifest('{"files": {'),
    "manifest-files-a-list": manifest('{"format": "wanka-ckpt-v1", "files": [".metadata"]}'),
    "manifest-files-missing": manifest('{"format": "wanka-ckpt-v1", "step": 1}'),
    "manifest-a-list": manifest("[1, 2]"),
    "manifest-without-metadata": manifest('{"format": "wanka-ckpt-v1", "files": {"train_state.json": "00"}}'),
    "manifest-binary": manifest(b"\xff\xfe\x00\x01"),
    "manifest-deep-json": manifest("[" * 100_000 + "]" * 100_000),
    "manifest-hash-not-a-string": manifest('{"files": {".metadata": 5}}'),
    "rehashed-shard-garbage": then_rehash(write(f"{S}/__0_0.distcp", b"\x80\x04garbage" * 100)),
    "rehashed-shard-truncated": then_rehash(truncate(f"{S}/__0_0.distcp", 0.05)),
    "rehashed-metadata-garbage": then_rehash(write(f"{S}/.metadata", b"not a pickle")),
    "rehashed-metadata-truncated": then_rehash(truncate(f"{S}/.metadata", 0.5)),
    "rehashed-train-state-malformed": edit_train_state(lambda s: "{not json"),
    "rehashed-train-state-a-list": edit_train_state(lambda s: "[1, 2]"),
    "rehashed-train-state-no-spec": edit_train_state(drop("model_spec")),
    "rehashed-train-state-no-step": edit_train_state(drop("step")),
    "rehashed-wrong-model-moe": edit_train_state(moe_spec),
    "rehashed-wrong-model-wider": edit_train_state(wider_spec),
    "rehashed-spec-layers-negative": edit_train_state(spec_field("layers", -1)),
    "rehashed-spec-unknown-key": edit_train_state(spec_field("colour", "red")),
}


@pytest.mark.parametrize("damage", list(CKPT_DAMAGE), ids=list(CKPT_DAMAGE))
@pytest.mark.parametrize("given", ["step-dir", "run-root"])
def test_damaged_checkpoint_is_refused_by_export(real_run, refused, tmp_path, damage, given):
    ck = tmp_path / "case" / "ck"
    shutil.copytree(real_run[0], ck)
    CKPT_DAMAGE[damage](ck)
    target = ck / STEP if given == "step-dir" else ck
    field = "train_state.json" if damage.startswith("rehashed-spec") else "ckpt"  # names the spec's file
    refused(Case(damage, ("export", "--ckpt", str(target), "--out", "{d}/exp"), field), tmp_path / "case")


@pytest.mark.parametrize("model", ["tiny-moe", "llama3-8b"])
def test_train_refuses_a_checkpoint_dir_of_another_model(real_run, refused, tmp_path, model):
    ck = tmp_path / "case" / "ck"
    shutil.copytree(real_run[0], ck)
    refused(Case(f"train-{model}", ("train", "--model", model, "--steps", "2", "--ckpt", str(ck)), "ckpt"),
            tmp_path / "case")


# ---- exports ----------------------------------------------------------------------------------------
def edit_config(change):
    def f(d: Path):
        p = d / "config.json"
        config = json.loads(p.read_text())
        change(config)
        p.write_text(json.dumps(config))
    return f


def setter(*path, value):
    def change(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


EXPORT_DAMAGE = {
    "config-deleted": (delete("config.json"), "config.json"),
    "config-empty": (write("config.json", ""), "config.json"),
    "config-malformed": (write("config.json", '{"format": '), "config.json"),
    "config-a-list": (write("config.json", "[]"), "config.json"),
    "config-binary": (write("config.json", b"\xff\xfe\x00"), "config.json"),
    "config-deep-json": (write("config.json", "[" * 100_000 + "]" * 100_000), "config.json"),
    "config-format-wrong": (edit_config(setter("format", value="onnx")), "format"),
    "config-dtype-fp16": (edit_config(setter("dtype", value="float16")), "dtype"),
    "config-step-a-string": (edit_config(setter("step", value="one")), "step"),
    "config-model-layers-zero": (edit_config(setter("model", "layers", value=0)), "layers"),
    "config-model-wider": (edit_config(setter("model", "hidden", value=256)), "model.safetensors"),
    "config-model-nan": (edit_config(setter("model", "rope_theta", value=float("nan"))), "rope_theta"),
    "config-model-a-string": (edit_config(setter("model", value="tiny")), "model"),
    "config-hash-wrong": (edit_config(setter("params_sha256", value="0" * 64)), "params_sha256"),
    "config-tokenizer-elsewhere": (edit_config(setter("tokenizer", value="../../etc/passwd")), "tokenizer"),
    "weights-deleted": (delete("model.safetensors"), "model.safetensors"),
    "weights-empty": (write("model.safetensors", b""), "model.safetensors"),
    "weights-truncated": (truncate("model.safetensors", 0.5), "model.safetensors"),
    "weights-header-flipped": (flip("model.safetensors", 0.0), "model.safetensors"),
    "weights-data-flipped": (flip("model.safetensors", 0.9), "params_sha256"),
    "tokenizer-deleted": (delete("tokenizer.json"), "tokenizer.json"),
    "tokenizer-malformed": (write("tokenizer.json", "{"), "tokenizer"),
    "tokenizer-a-list": (write("tokenizer.json", "[1]"), "tokenizer"),
}


@pytest.fixture
def no_server(monkeypatch):
    """A case that passed validation would start a server and block; fail it instead."""
    import wanka.serve.server as server

    def refuse(*a, **k):
        raise AssertionError("a damaged export reached make_server")

    monkeypatch.setattr(server, "make_server", refuse)


@pytest.mark.parametrize("damage", list(EXPORT_DAMAGE), ids=list(EXPORT_DAMAGE))
def test_damaged_export_is_refused_by_serve(real_run, refused, tmp_path, no_server, damage):
    exp = tmp_path / "case" / "exp"
    shutil.copytree(real_run[1], exp)
    change, field = EXPORT_DAMAGE[damage]
    change(exp)
    refused(Case(damage, ("serve", "--model", str(exp), "--port", "0"), field), tmp_path / "case")
