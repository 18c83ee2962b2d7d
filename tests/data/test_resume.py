"""`wanka data prepare` killed with SIGKILL in the middle of a shard resumes to byte-identical shards.

The kill is synchronised on the pipeline's own progress: with WANKA_PREPARE_HOLD_AT_SHARD=N the
process writes shard N's files, drops `.progress/held` and blocks before committing; the test
waits for that file (no timer decides anything) and kills the whole process group (workers too)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from wanka.data.pipeline import HOLD_ENV


def _corpus(path):
    rng = random.Random(7)
    words = [f"t{n}k" for n in range(2000)]
    docs = [" ".join(rng.choice(words) for _ in range(80)) for _ in range(300)]
    docs += docs[:30]  # planted exact duplicates, so the dedup state matters for the resumed part
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))


def _prepare_cmd(src, out):
    return [sys.executable, "-m", "wanka", "data", "prepare", str(src), "--out", str(out), "--shard-tokens", "5000",
            "--workers", "2", "--json"]


@pytest.mark.slow
def test_kill_9_mid_shard_then_resume_is_byte_identical(tmp_path):
    src = tmp_path / "c.jsonl"
    _corpus(src)
    ref, out = tmp_path / "ref", tmp_path / "out"
    subprocess.run(_prepare_cmd(src, ref), check=True, capture_output=True)
    ref_meta = json.loads((ref / "meta.json").read_text())
    assert len(ref_meta["shards"]) >= 6

    proc = subprocess.Popen(_prepare_cmd(src, out), env={**os.environ, HOLD_ENV: "3"}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # a safety net against a hang only; the sync is the file
        while not (out / ".progress" / "held").exists():
            assert proc.poll() is None, "prepare exited before reaching the hold point"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    state = json.loads((out / ".progress" / "state.json").read_text())
    assert len(state["shards"]) == 3  # shards 0-2 committed; shard 3's files exist but are not
    assert (out / "shard_00003.bin").exists() and not (out / "meta.json").exists()
    committed_inode = (out / "shard_00002.bin").stat().st_ino

    done = subprocess.run(_prepare_cmd(src, out), check=True, capture_output=True, text=True)
    meta = json.loads(done.stdout)
    assert meta["tokens"] == ref_meta["tokens"]
    for s in ref_meta["shards"]:
        assert (out / s["file"]).read_bytes() == (ref / s["file"]).read_bytes()
        assert (out / s["idx"]).read_bytes() == (ref / s["idx"]).read_bytes()
    assert sorted(p.name for p in out.glob("shard_*")) == sorted(p.name for p in ref.glob("shard_*"))
    assert json.loads((out / "meta.json").read_text())["sources"] == ref_meta["sources"]  # counters resumed too
    assert not (out / ".progress").exists()
    assert (out / "shard_00002.bin").stat().st_ino == committed_inode  # resumed: committed shards not rewritten
