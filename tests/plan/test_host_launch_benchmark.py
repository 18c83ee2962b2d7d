"""benchmarks/host_launch.py, the GPU check's host-time measurement (benchmarks/gpu_check.sh step 3), runs
on this CPU-only machine too: one JSON object, every operator kind timed, no launches counted without CUDA."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "host_launch.py"


def _module():
    spec = importlib.util.spec_from_file_location("host_launch", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_operator_kind_is_timed_and_written_to_out(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert _module().main(["--calls", "3", "--experts", "4", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "host_launch.json").read_text())
    ops = {r["op"]: r for r in printed["ops"]}
    assert set(ops) == {"elementwise_add", "router", "permute", "gemm", "grouped_gemm", "swiglu_mlp_fwd_bwd"}
    assert all(r["host_us_per_call"] > 0 for r in ops.values())
    if printed["device"] == "cpu":  # no CUDA: no launches, no device time, the loop stands in for the grouped GEMM
        assert all(r["launches_per_call"] is None and r["device_us_per_call"] is None for r in ops.values())
        assert printed["grouped_gemm"] == "4 x torch.mm"


def test_bad_counts_are_refused_with_exit_2():
    with pytest.raises(SystemExit) as exc:
        _module().main(["--calls", "0"])
    assert exc.value.code == 2
