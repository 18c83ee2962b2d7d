"""`wanka train --init hf:DIR` and `wanka export --format hf`: a directory written by `transformers`
itself goes through wanka training (lr = 0) and comes back bit-for-bit; bad directories exit 2."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
from wanka.train.hf_format import hf_config  # noqa: E402
from wanka.workload import load_model  # noqa: E402

transformers.utils.logging.disable_progress_bar()  # keep stderr to wanka's own one line


def _hf_llama(path, **overrides):
    """A random LlamaForCausalLM of tiny's shape, saved by transformers' own save_pretrained."""
    cfg = {k: v for k, v in hf_config(load_model("tiny"), 256, 257).items()
           if k not in ("architectures", "model_type", "wanka_model_name")}
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**cfg, **overrides})).save_pretrained(path)
    return path


@pytest.mark.slow
def test_hf_to_wanka_train_to_hf_is_bit_exact(run_cli, corpus_dir, tmp_path):
    src = _hf_llama(tmp_path / "src")
    code, _, err = run_cli("train", "--model", "tiny", "--init", f"hf:{src}", "--steps", "2", "--lr", "0",
                           "--data", str(corpus_dir), "--ckpt", str(tmp_path / "ckpt"), "--json")
    assert code == 0, err
    code, _, err = run_cli("export", "--ckpt", str(tmp_path / "ckpt"), "--out", str(tmp_path / "out"), "--format", "hf")
    assert code == 0, err
    before = safetensors_torch.load_file(str(src / "model.safetensors"))
    after = safetensors_torch.load_file(str(tmp_path / "out" / "model.safetensors"))
    assert set(before) == set(after)
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the shipped tokenizer is the run's (byte) tokenizer, readable by transformers
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    text = "万卡 trains, 1 plus 2 is 3."
    assert tok(text)["input_ids"] == list(text.encode())
    assert tok.eos_token_id == 257 and tok.bos_token_id == 256
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    assert type(model).__name__ == "LlamaForCausalLM"


def _train_init(run_cli, corpus_dir, tmp_path, init, model="tiny"):
    return run_cli("train", "--model", model, "--init", init, "--steps", "1", "--data", str(corpus_dir),
                   "--ckpt", str(tmp_path / "ckpt"))


def test_init_errors_exit_2_with_one_line(run_cli, corpus_dir, tmp_path):
    src = _hf_llama(tmp_path / "src")
    code, out, err = _train_init(run_cli, corpus_dir, tmp_path, str(src))
    assert code == 2 and "init: expected hf:DIR" in err and len(err.strip().splitlines()) == 1
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{tmp_path / 'nope'}")
    assert code == 2 and "init: expected hf:DIR with an existing" in err
    # architecture mismatch: a dense Llama directory for the MoE model
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{src}", model="tiny-moe")
    assert code == 2 and "architectures: expected ['Qwen2MoeForCausalLM']" in err and len(err.strip().splitlines()) == 1
    wide = _hf_llama(tmp_path / "wide", hidden_size=256, head_dim=64)
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{wide}")
    assert code == 2 and "hidden_size: expected 128" in err
    # a tensor of the wrong shape under a matching config
    tensors = safetensors_torch.load_file(str(src / "model.safetensors"))
    tensors["model.layers.1.mlp.up_proj.weight"] = torch.zeros(10, 128)
    safetensors_torch.save_file(tensors, str(src / "model.safetensors"))
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{src}")
    assert code == 2 and "model.layers.1.mlp.up_proj.weight: expected shape [384, 128], got [10, 128]" in err
    (src / "model.safetensors").unlink()
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{src}")
    assert code == 2 and "model.safetensors: expected a safetensors file in the --init directory (missing)" in err
    (src / "config.json").unlink()
    code, _, err = _train_init(run_cli, corpus_dir, tmp_path, f"hf:{src}")
    assert code == 2 and "config.json: expected config.json in the --init directory (missing)" in err
    assert not (tmp_path / "ckpt" / "run.json").exists()  # nothing started


def test_export_hf_refuses_gelu_in_one_line(tmp_path):
    from wanka.errors import SpecError
    from wanka.train.export import _write_hf

    spec = load_model("tiny").model_copy(update={"activation": "gelu"})
    with pytest.raises(SpecError, match="model.activation"):
        _write_hf(tmp_path, {"model_spec": spec.model_dump(), "step": 0}, {}, None)
    assert not (tmp_path / "model.safetensors").exists()


def test_export_hf_ships_the_runs_bpe_tokenizer(tmp_path):
    """A run trained on BPE data: the HF export's tokenizer gives transformers the run's ids."""
    pytest.importorskip("tokenizers")
    from wanka.data.bpe import train_bpe
    from wanka.data.corpus import generate
    from wanka.data.tokenizer import load_tokenizer
    from wanka.train.export import _write_hf
    from wanka.model.decoder import Transformer

    spec = load_model("tiny")
    train_bpe([generate(300, seed=s) for s in range(4)], vocab=400).save(tmp_path / "tokenizer.json")
    params = {k: v.detach() for k, v in Transformer(spec).state_dict().items()}
    (tmp_path / "out").mkdir()
    _write_hf(tmp_path / "out", {"model_spec": spec.model_dump(), "step": 3}, params, tmp_path / "tokenizer.json")
    ours = load_tokenizer(tmp_path / "tokenizer.json")
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    text = "the busy cluster restarts the job."
    assert hf_tok(text)["input_ids"] == ours.encode(text)
    assert hf_tok.eos_token_id == ours.eos_id
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (cfg["bos_token_id"], cfg["eos_token_id"], cfg["wanka_step"]) == (ours.bos_id, ours.eos_id, 3)


def test_wanka_export_ships_the_tokenizer_train_kept(tmp_path):
    """`wanka train` keeps the data's tokenizer.json in the checkpoint root; export finds it from a step dir."""
    pytest.importorskip("tokenizers")
    from wanka.data.bpe import train_bpe
    from wanka.data.corpus import generate
    from wanka.data.tokenizer import load_tokenizer
    from wanka.train.cli import _keep_tokenizer
    from wanka.train.export import _write_wanka, run_tokenizer_file

    train_bpe([generate(300, seed=1)], vocab=300).save(tmp_path / "data_tok.json")
    _keep_tokenizer(tmp_path / "data_tok.json", tmp_path / "ckpt")
    (tmp_path / "ckpt" / "step_00000002").mkdir()
    found = run_tokenizer_file(tmp_path / "ckpt" / "step_00000002")
    assert found == tmp_path / "ckpt" / "tokenizer.json"
    (tmp_path / "out").mkdir()
    _write_wanka(tmp_path / "out", {"model_spec": load_model("tiny").model_dump(), "step": 2}, {}, "", found)
    assert load_tokenizer(tmp_path / "out" / "tokenizer.json").vocab_size == 300
