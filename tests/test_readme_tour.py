"""Every command of the README's tour runs, in order, in a fresh directory, as a user would type it.

The tour block is parsed from README.md (continuation lines joined, comments and `[optional]` groups
dropped). The inputs a user brings themselves are made first: a text corpus, a web folder and a
Parquet file for `data`, and `my.yaml` describing this machine for `plan calibrate`. Servers (`wanka
serve`, `wanka control up`) start in the background on free ports and are waited for on their health
endpoints; the control job is followed until it ends. Each command must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

README = Path(__file__).resolve().parents[1] / "README.md"
WANKA = [sys.executable, "-m", "wanka"]
COMMAND_TIMEOUT_S = 1800  # a bound, not a speed check: the slowest tour command takes minutes on 2 loaded cores
SERVER_START_S = 300


def tour_commands() -> list[str]:
    text = README.read_text()
    block = re.search(r"## A tour\n```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no '## A tour' bash block"
    joined = re.sub(r"\\\n\s*", " ", block.group(1))
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"\s#.*$", "", line).strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s*\[[^\]]*\]", "", line)  # [--quantize int8] and the like are optional
        commands += [part.strip() for part in line.split(";") if part.strip()]
    return commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)  # polling a server that is starting; the assertion is on its answer
    raise AssertionError(f"{url} did not answer within {SERVER_START_S} s")


def make_user_inputs(cwd: Path) -> None:
    """What the tour assumes a user has: raw text, a web crawl, a Parquet file, a spec of this machine."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wanka.data.corpus import write_corpus

    files = write_corpus(cwd / "corpus", n_sentences=3000)
    web = cwd / "web"
    web.mkdir()
    lines = "".join(Path(f).read_text() for f in files).splitlines()
    with (web / "crawl.jsonl").open("w") as f:
        for i in range(0, len(lines), 5):
            f.write(json.dumps({"text": " ".join(lines[i:i + 5])}) + "\n")
    pq.write_table(pa.table({"text": [" ".join(lines[i:i + 8]) for i in range(1, len(lines), 8)]}),
                   cwd / "books.parquet")
    (cwd / "my.yaml").write_text(yaml.safe_dump({
        "name": "this-machine", "gpus": 1, "gpus_per_node": 1,
        "gpu": {"name": "cpu-host", "peak_tflops": {"fp32": 0.1, "tf32": 0.1, "bf16": 0.1},
                "hbm_GB": 16, "hbm_TBps": 0.02},
        "scale_up": {"domain": 1, "bandwidth_GBps": 10}, "scale_out": {"bandwidth_Gbps": 10, "topology": "fat-tree"}}))


@pytest.mark.slow
@pytest.mark.timeout(3 * COMMAND_TIMEOUT_S)
def test_every_tour_command_runs(tmp_path):
    commands = tour_commands()
    assert len(commands) >= 30 and all(c.startswith("wanka ") for c in commands), commands
    make_user_inputs(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    serve_port, control_port = free_port(), free_port()
    env["WANKA_CONTROL_URL"] = f"http://127.0.0.1:{control_port}"
    servers: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        for command in commands:
            print(f"[{time.monotonic() - started:7.1f} s] {command}", flush=True)
            background = command.endswith("&")
            argv = shlex.split(command.rstrip("&").strip())[1:]
            argv = [a.replace("8000", str(serve_port)) for a in argv]
            if argv[:2] == ["control", "up"]:
                argv = [a.replace("8470", str(control_port)) for a in argv]
            if argv[0] == "serve" or argv[:2] == ["control", "up"]:
                log = open(tmp_path / f"{argv[0]}.log", "w")
                proc = subprocess.Popen(WANKA + argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                servers.append(proc)
                health = f"{serve_port}/health" if argv[0] == "serve" else f"{control_port}/healthz"
                wait_http(f"http://127.0.0.1:{health}", proc)
                continue
            assert not background, command
            done = subprocess.run(WANKA + argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=COMMAND_TIMEOUT_S)
            assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
            if argv[:2] == ["control", "submit"]:
                wait_control_job_ends(tmp_path, env)
    finally:
        for proc in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def wait_control_job_ends(cwd: Path, env: dict) -> None:
    """A submitted job trains to completion under the service (followed as a user would, with `show`)."""
    deadline = time.monotonic() + COMMAND_TIMEOUT_S
    while time.monotonic() < deadline:
        shown = subprocess.run(WANKA + ["control", "show", "1", "--json"], cwd=cwd, env=env, capture_output=True,
                               text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        job = json.loads(shown.stdout)
        if job["state"] in ("succeeded", "failed", "cancelled"):
            assert job["state"] == "succeeded", job
            return
        time.sleep(1)  # polling the service; the assertion is on the job's final state
    raise AssertionError("the control job did not end")
