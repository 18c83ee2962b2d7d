"""`wanka export --ckpt DIR --out DIR [--format wanka|hf]`: a committed checkpoint ->
- wanka (default): the serving contract (docs/serve.md "Export directory"; `wanka.serve.export` is its reader): config.json,
  model.safetensors (fp32), tokenizer.json;
- hf: a Hugging Face Llama / Mixtral / Qwen2-MoE directory (train/hf_format.py): config.json,
  generation_config.json, model.safetensors with HF names, tokenizer.json (tokenizers format),
  tokenizer_config.json - what `transformers.AutoModelForCausalLM.from_pretrained` reads.

The tokenizer is the one the run trained with: `wanka train` copies the data's tokenizer.json into
the checkpoint root; checkpoints without one used the byte tokenizer.

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

from wanka.data.tokenizer import ByteTokenizer, load_tokenizer
from wanka.errors import SpecError
from wanka.train import checkpoint as ck
from wanka.model.decoder import Transformer
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


FORMATS = ("wanka", "hf")


def run_tokenizer_file(ckpt: Path) -> Path | None:
    """The tokenizer.json `wanka train` stored beside the run's step_N directories (None: byte)."""
    for d in (ckpt, ckpt.parent):
        if (d / "tokenizer.json").is_file():
            return d / "tokenizer.json"
    return None


def _write_wanka(tmp: Path, train_state: dict, params: dict, digest: str, tok_file: Path | None) -> list[str]:
    from safetensors.torch import save_file

    config = {"format": "wanka-export-v1", "model": train_state["model_spec"], "dtype": "float32",
              "step": train_state["step"], "params_sha256": digest, "tokenizer": "tokenizer.json"}
    save_file(params, str(tmp / "model.safetensors"))
    if tok_file is None:
        ByteTokenizer().save(tmp / "tokenizer.json")
    else:
        shutil.copyfile(tok_file, tmp / "tokenizer.json")
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    return ["model.safetensors", "tokenizer.json", "config.json"]


def _write_hf(tmp: Path, train_state: dict, params: dict, tok_file: Path | None) -> list[str]:
    from safetensors.torch import save_file

    from wanka.data.bpe import byte_tokenizer_json
    from wanka.train.hf_format import hf_config, to_hf

    spec = parse_model_spec(train_state["model_spec"])
    tok = load_tokenizer(tok_file) if tok_file else ByteTokenizer()
    if tok.vocab_size > spec.vocab:
        raise SpecError("model.vocab", f">= the tokenizer's vocab ({tok.vocab_size})", spec.vocab)
    config = hf_config(spec, tok.bos_id, tok.eos_id)  # refuses (one line) what HF cannot compute exactly
    save_file(to_hf(spec, params), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    if isinstance(tok, ByteTokenizer):  # the same ids, in the tokenizers format transformers reads
        (tmp / "tokenizer.json").write_text(byte_tokenizer_json())
    else:
        shutil.copyfile(tok_file, tmp / "tokenizer.json")
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "add_bos_token": False, "add_eos_token": False, "model_max_length": spec.seq_len, "clean_up_tokenization_spaces": False}, indent=2))
    (tmp / "generation_config.json").write_text(json.dumps({
        "bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id, "do_sample": True, "temperature": 1.0, "top_p": 1.0}, indent=2))
    (tmp / "config.json").write_text(json.dumps({**config, "wanka_step": train_state["step"]}, indent=2))
    return ["model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "config.json"]


def export(ckpt: Path, out: Path, fmt: str = "wanka") -> dict:
    """Write the export into a hidden sibling directory, then move it into place: a failed export
    leaves no partial directory, and an existing `out` keeps its old files until the new ones are
    complete (config.json, which names the step and hash, goes in last)."""
    if fmt not in FORMATS:
        raise SpecError("format", f"one of {', '.join(FORMATS)}", fmt)
    ckpt = resolve_checkpoint(Path(ckpt))
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SpecError("out", "a directory path", str(out))
    if out.resolve() == ckpt.resolve() or ckpt.resolve() in out.resolve().parents:
        raise SpecError("out", "a directory outside the checkpoint", str(out))
    train_state, params = load_params(ckpt)
    digest = sha256_of(params)
    tok_file = run_tokenizer_file(ckpt)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise SpecError("out", "a directory path that can be created", f"{out} ({exc.strerror})") from None
    try:
        if fmt == "hf":
            names = _write_hf(tmp, train_state, params, tok_file)
        else:
            names = _write_wanka(tmp, train_state, params, digest, tok_file)
        mode = 0o666 & ~_umask()  # safetensors writes 0600; an export is meant to be read by a server
        for f in tmp.iterdir():
            f.chmod(mode)
        if not out.exists():
            tmp.chmod(0o777 & ~_umask())
            os.replace(tmp, out)
        else:
            for name in names:
                os.replace(tmp / name, out / name)
    except OSError as exc:
        raise SpecError("out", "a writable directory with room for the export", f"{out} ({exc.strerror})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"out": str(out), "checkpoint": str(ckpt), "step": train_state["step"], "params_sha256": digest,
            "tensors": len(params), "format": fmt}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
