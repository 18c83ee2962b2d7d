"""Export directories: the contract format loads; each kind of damage is one clear error."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from wanka.cli import main
from wanka.errors import SpecError
from wanka.serve.export import expected_shapes, load_export


def test_valid_export_loads(tiny_export, moe_export):
    assert tiny_export.spec.name == "tiny" and tiny_export.tokenizer.vocab_size == 258
    assert set(tiny_export.tensors) == set(expected_shapes(tiny_export.spec))
    assert "layers.1.feed_forward.experts.3.w2.weight" in moe_export.tensors
    assert "layers.0.feed_forward.w1.weight" in moe_export.tensors  # dense_layers: 1


def _copy(src, tmp_path):
    dst = tmp_path / "export"
    shutil.copytree(src, dst)
    return dst


def _rewrite_tensors(d, change):
    tensors = load_file(str(d / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(d / "model.safetensors"))


def _rewrite_config(d, change):
    cfg = json.loads((d / "config.json").read_text())
    change(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


DAMAGE = {
    "missing weights": (lambda d: (d / "model.safetensors").unlink(), "model.safetensors"),
    "missing config": (lambda d: (d / "config.json").unlink(), "config.json"),
    "missing tokenizer": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json"),
    "garbage weights": (lambda d: (d / "model.safetensors").write_bytes(b"not safetensors"), "model.safetensors"),
    "config not json": (lambda d: (d / "config.json").write_text("{oops"), "config.json"),
    "wrong format": (lambda d: _rewrite_config(d, lambda c: c.update(format="v0")), "format"),
    "bad model field": (lambda d: _rewrite_config(d, lambda c: c["model"].update(heads=3)), "heads"),
    "unknown model field": (lambda d: _rewrite_config(d, lambda c: c["model"].update(hiden=3)), "model.hiden"),
    "wrong shape": (lambda d: _rewrite_tensors(d, lambda t: t.update({"layers.0.attention.wk.weight": torch.zeros(128, 128)})),
                    "layers.0.attention.wk.weight: expected shape [64, 128]"),
    "missing tensor": (lambda d: _rewrite_tensors(d, lambda t: t.pop("norm.weight")), "norm.weight"),
    "extra tensor": (lambda d: _rewrite_tensors(d, lambda t: t.update({"layers.9.x": torch.zeros(1)})), "layers.9.x"),
    "edited weights": (lambda d: _rewrite_tensors(d, lambda t: t["norm.weight"].mul_(2)), "params_sha256"),
    "tokenizer outside the dir": (lambda d: _rewrite_config(d, lambda c: c.update(tokenizer="../tokenizer.json")),
                                  "tokenizer: expected a file name inside the export directory"),
    "wrong dtype": (lambda d: _rewrite_tensors(d, lambda t: t.update({"norm.weight": t["norm.weight"].half()})),
                    "norm.weight: expected dtype float32"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_malformed_export_is_one_named_error(kind, tiny_dir, tmp_path):
    damage, names = DAMAGE[kind]
    d = _copy(tiny_dir, tmp_path)
    damage(d)
    with pytest.raises(SpecError) as err:
        load_export(d)
    assert names in str(err.value)


def test_cli_serve_malformed_export_exits_2_with_one_line(tiny_dir, tmp_path, capsys):
    d = _copy(tiny_dir, tmp_path)
    _rewrite_tensors(d, lambda t: t.pop("output.weight"))
    assert main(["serve", "--model", str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "output.weight" in err and "missing" in err
    assert main(["serve", "--model", str(tmp_path / "nope")]) == 2
    assert "--model" in capsys.readouterr().err
