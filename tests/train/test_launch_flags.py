"""`wanka launch` validates everything it writes into a job file (names, queues, switches,
segments, paths) and quotes paths, so a job file never carries shell syntax from a flag."""

import pytest


@pytest.mark.parametrize("extra, field", [
    (["--name", "x; rm -rf /"], "name"),
    (["--name", "Bad_Name"], "name"),
    (["--switches", "two"], "switches"),
    (["--segment", "9"], "segment"),
    (["--queue", "a: b"], "queue"),
    (["--out", "/proc/no/such/file"], "out"),
])
def test_launch_rejects_unsafe_or_malformed_flags(run_cli, extra, field):
    code, out, err = run_cli("launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4", *extra)
    assert code == 2 and err.startswith(f"wanka: error: {field}:") and err.count("\n") == 1 and out == ""


def test_launch_quotes_paths_and_allows_fp8_for_gpus(run_cli, tmp_path):
    code, out, err = run_cli("launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8,precision=fp8",
                             "--nodes", "4", "--data-dir", "/data with space")
    assert code == 0, err
    assert "--data '/data with space'" in out and "precision=fp8" in out
