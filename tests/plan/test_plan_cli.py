"""`wanka plan` through wanka.cli.main: JSON contract and one-line errors (exit 2)."""

import json

import pytest

from wanka.cli import main

BAD = [
    ["plan", "--model", "no-such-model"],
    ["plan", "--model", "llama3-8b", "--cluster", "no-such-cluster"],
    ["plan", "--model", "llama3-70b", "--gpus", "24", "--layout", "tp=3"],  # 3 does not divide 64 heads
    ["plan", "--model", "llama3-70b", "--gpus", "64", "--layout", "tp=8,pp=2,dp=3"],  # product != GPUs
    ["plan", "--model", "llama3-8b", "--tokens", "15X"],
    ["plan", "--model", "llama3-8b", "--layout", "tp=8,pp=two"],
    ["plan", "--model", "llama3-8b", "--layout", "zz=1"],
    ["plan", "--model", "llama3-8b", "--gpus", "0"],
    ["plan", "--model", "llama3-8b", "--gpus", "99999999"],
    ["plan"],
    ["plan", "scale", "--model", "llama3-8b", "--gpus", "64,abc"],
    ["plan", "--model", "llama3-8b", "--recompute-modules", "layernorm,foo"],
    ["plan", "--model", "llama3-8b", "--gpus", "8", "--layout", "tp=8", "--pipeline", "dualpipe"],  # pp=1
    ["plan", "--model", "llama3-8b", "--pipeline", "gpipe"],
    ["plan", "--model", "llama3-405b", "--gpus", "16384", "--layout", "tp=8,pp=32,vpp=8,gbs=2048"],  # 256 > 126+2
    ["plan", "--model", "llama3-8b", "--tp-overlap", "1.5"],
    ["plan", "--model", "llama3-8b", "--zero3-unit", "module"],
    ["plan", "--model", "llama3-8b", "--algorithm", "star"],
]


def test_metas_uneven_interleaving_is_a_valid_layout(run_json):
    # Llama 3 405B: 126 layers on 16 stages x 8 chunks, embedding and loss counted as pipeline layers
    doc = run_json("plan", "--model", "llama3-405b", "--cluster", "meta-24k-h100", "--gpus", "16384",
                   "--layout", "tp=8,pp=16,vpp=8,gbs=2048,zero=2")
    assert doc["layout"].startswith("tp=8,pp=16") and "vpp=8" in doc["layout"] and doc["fits"]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a[1:]) or "no-args")
def test_bad_input_is_exit_2_and_one_line(argv, run_cli):
    rc, _, err = run_cli(*argv)
    assert rc == 2
    err = err.strip()
    assert len(err.splitlines()) == 1 and "error" in err and "Traceback" not in err


def test_layout_json(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--layout", "tp=8,gbs=128", "--tokens", "1T", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "tflops_per_gpu",
                "memory_GB_per_gpu", "fits", "breakdown", "days", "gpu_hours", "energy_MWh"):
        assert key in d
    assert "candidates" not in d and d["layout"].startswith("tp=8")


def test_search_json_has_candidates(capsys):
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--gbs", "128", "--top", "3", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 1 <= len(d["candidates"]) <= 3 and d["candidates"][0]["layout"] == d["layout"]
    assert d["search"]["layouts_evaluated"] > 0


def test_scale_json(capsys):
    assert main(["plan", "scale", "--model", "tiny", "--gpus", "8,16", "--gbs", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["gpus"] for r in rows] == [8, 16] and rows[0]["scaling_efficiency"] == 1.0
