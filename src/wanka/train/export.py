"""`wanka export --ckpt DIR --out DIR`: a committed checkpoint -> the serving contract
(docs/serve.md "Export directory"; `wanka.serve.export` is its reader): config.json, model.safetensors (fp32), tokenizer.json.

Runs in one process without torch.distributed: DCP reads the checkpoint's global tensors into a
plain model's state dict, whatever layout or world size saved it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from wanka.data.tokenizer import ByteTokenizer
from wanka.errors import SpecError
from wanka.train import checkpoint as ck
from wanka.train.model import Transformer
from wanka.train.state import sha256_of
from wanka.workload.spec import parse_model_spec


def resolve_checkpoint(path: Path) -> Path:
    """A step_N dir, or a run's checkpoint root (-> its newest valid step)."""
    if not path.is_dir():
        raise SpecError("ckpt", "an existing checkpoint directory", str(path))
    if (path / "manifest.json").is_file():
        reason = ck.verify(path)
        if reason:
            raise SpecError("ckpt", "a checkpoint matching its manifest.json", reason, source=str(path))
        return path
    found = ck.latest_valid(path, log=lambda _: None)
    if found is None:
        raise SpecError("ckpt", "a directory holding a valid step_N checkpoint (manifest.json)", str(path))
    return found[1]


def load_params(ckpt: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    source = str(ckpt / "train_state.json")
    try:
        train_state = json.loads((ckpt / "train_state.json").read_text())
    except (OSError, ValueError, RecursionError):  # ValueError: not UTF-8, not JSON
        raise SpecError("ckpt", "a readable train_state.json (JSON)", source=source) from None
    if not isinstance(train_state, dict) or not isinstance(train_state.get("model_spec"), dict):
        raise SpecError("ckpt", "a train_state.json object with a model_spec mapping", source=source)
    if not isinstance(train_state.get("step"), int):
        raise SpecError("ckpt", "a train_state.json with an integer step", train_state.get("step"), source=source)
    spec = parse_model_spec(train_state["model_spec"], source=source)
    model = Transformer(spec)
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming single process" from DCP
        try:
            dcp.load(state, checkpoint_id=str(ckpt))
        except (Exception, CheckpointException) as exc:  # noqa: BLE001 - DCP reports damaged or mismatched
            # files with many types; CheckpointException derives from BaseException and carries each
            # rank's traceback as text, so only the innermost error line is kept
            lines = [l.strip() for l in str(exc).splitlines() if l.strip() and not l.startswith((" ", "Traceback"))]
            reason = (lines[-1] if lines else type(exc).__name__)[:200]
            raise SpecError("ckpt", f"DCP files that hold model {spec.name!r} as train_state.json describes it",
                            reason, source=str(ckpt)) from None
    params = {k: v.detach().float().contiguous() for k, v in state["model"].items()}
    return train_state, params


def export(ckpt: Path, out: Path) -> dict:
    """Write the export into a hidden sibling directory, then move it into place: a failed export
    leaves no partial directory, and an existing `out` keeps its old files until the new ones are
    complete (config.json, which names the step and hash, goes in last)."""
    from safetensors.torch import save_file

    ckpt = resolve_checkpoint(Path(ckpt))
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecError("out", "a directory path", str(out))
    if out.resolve() == ckpt.resolve() or ckpt.resolve() in out.resolve().parents:
        raise SpecError("out", "a directory outside the checkpoint", str(out))
    train_state, params = load_params(ckpt)
    digest = sha256_of(params)
    config = {"format": "wanka-export-v1", "model": train_state["model_spec"], "dtype": "float32",
              "step": train_state["step"], "params_sha256": digest, "tokenizer": "tokenizer.json"}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise SpecError("out", "a directory path that can be created", f"{out} ({exc.strerror})") from None
    try:
        save_file(params, str(tmp / "model.safetensors"))
        ByteTokenizer().save(tmp / "tokenizer.json")
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        mode = 0o666 & ~_umask()  # safetensors writes 0600; an export is meant to be read by a server
        for f in tmp.iterdir():
            f.chmod(mode)
        if not out.exists():
            tmp.chmod(0o777 & ~_umask())
            os.replace(tmp, out)
        else:
            for name in ("model.safetensors", "tokenizer.json", "config.json"):
                os.replace(tmp / name, out / name)
    except OSError as exc:
        raise SpecError("out", "a writable directory with room for the export", f"{out} ({exc.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"out": str(out), "checkpoint": str(ckpt), "step": train_state["step"], "params_sha256": digest,
            "tensors": len(params)}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
