"""`wanka export` is all-or-nothing: a bad --out leaves nothing behind, a good one replaces an old
export in place with files readable under the user's umask."""

import json
import os

from wanka.train.export import export


def test_failed_export_leaves_nothing_and_names_out(one_step_ckpt, tmp_path, run_cli):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli("export", "--ckpt", str(one_step_ckpt), "--out", str(tmp_path / "file" / "exp"))
    assert code == 2 and err.startswith("wanka: error: out:") and err.count("\n") == 1
    code, _, err = run_cli("export", "--ckpt", str(one_step_ckpt), "--out", str(one_step_ckpt / "step_00000001" / "exp"))
    assert code == 2 and err.startswith("wanka: error: out:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # no temp dir left behind


def test_export_is_readable_and_replaces_an_old_one(one_step_ckpt, tmp_path):
    out = tmp_path / "exp"
    out.mkdir()
    (out / "config.json").write_text("{old}")
    export(one_step_ckpt, out)
    assert json.loads((out / "config.json").read_text())["step"] == 1
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["exp"]
