"""`wanka serve` as a real process (start, answer, SIGTERM -> exit 0) and `wanka loadtest --json`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from wanka.cli import main


def test_wanka_serve_process_answers_and_stops_on_sigterm(tiny_dir):
    cmd = [sys.executable, "-m", "wanka", "serve", "--model", str(tiny_dir), "--port", "0", "--json",
           "--quantize", "int8", "--api-key", "k"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["quantization"].startswith("int8") and info["weight_bytes"] < info["fp32_weight_bytes"]
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 5, "temperature": 0}
        out = httpx.post(info["url"] + "/v1/completions", json=body, headers={"Authorization": "Bearer k"},
                         timeout=30).json()
        assert out["usage"]["completion_tokens"] == 5 or out["choices"][0]["finish_reason"] == "stop"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_loadtest_json(server, capsys):
    assert main(["loadtest", "--url", server.url, "--concurrency", "1,4", "--requests", "4", "--max-tokens", "6",
                 "--api-key", "test-key", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 4]
    for lv in result["levels"]:
        assert lv["errors"] == 0 and lv["requests"] == 4 and lv["completion_tokens"] == 24
        assert 0 < lv["ttft_p50_s"] <= lv["latency_p50_s"] <= lv["latency_p99_s"]


@pytest.mark.parametrize("args,field", [
    (["--concurrency", "1,x"], "--concurrency"),
    (["--concurrency", "0"], "--concurrency"),
    (["--url", "ftp://x"], "--url"),
    (["--url", "http://127.0.0.1:9"], "--url"),
])
def test_loadtest_bad_input_exits_2(args, field, capsys):
    argv = ["loadtest", "--url", "http://127.0.0.1:9", "--requests", "1", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err
