"""Fault -> detection -> resumed training under `wanka control up`, on real processes (tiny, dp=2, CPU).

    .venv/bin/python benchmarks/control_recovery.py [--hang-min-s 15]

For a killed rank and a hung rank it prints: seconds from the fault (the injector's marker file,
written just before it fires) to the supervisor's detection (audit detected_at), and to the
trainer's `restored` event of the relaunch (training resumed). The hang figure is dominated by the
rule's min_s by design. Figures depend on this machine's load; they are printed, not asserted.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare


def wait(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)
    return value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hang-min-s", type=float, default=15.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wanka-ctl-bench-"))
    prepare(write_corpus(root / "text", n_sentences=4000), root / "shards")
    (root / "rules.yaml").write_text(f"hang: {{factor: 20, min_s: {args.hang_min_s}, startup_grace_s: 600}}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(root / "service.log", "w")
    svc = subprocess.Popen([sys.executable, "-m", "wanka", "control", "up", "--port", str(port), "--slots", "2",
                            "--state-dir", str(root / "state"), "--rules", str(root / "rules.yaml"), "--poll", "0.3"],
                           stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: "serving on" in (root / "service.log").read_text(), 180, "the service")
        token = (root / "state" / "admin.token").read_text().strip()
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        wait(lambda: _ok(client), 60, "the API")
        for kind in ("kill", "hang"):
            ckpt = root / kind
            body = {"layout": "dp=2,precision=fp32,gbs=4,mbs=2", "seq_len": 64, "steps": 10, "ckpt_every": 3,
                    "data": str(root / "shards"), "ckpt": str(ckpt), "inject": [f"{kind}@step=5,rank=1"]}
            job_id = client.post("/v1/jobs", json=body).json()["id"]
            job = wait(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in ("succeeded", "failed") and j,
                       900, f"{kind} job")
            fault_s = float(next((ckpt / ".inject").glob(f"{kind}-5-1")).read_text())
            audit = next(a for a in job["audit"] if a["decision"] == "restart")
            events = [json.loads(l) for l in (ckpt / "events.jsonl").read_text().splitlines()]
            resumed_s = min(e["time"] for e in events if e["event"] == "restored" and e["time"] > fault_s)
            print(f"{kind:>4}: state {job['state']}, fault -> detection {audit['detected_at'] - fault_s:6.2f} s, "
                  f"fault -> resumed training {resumed_s - fault_s:6.2f} s ({audit['rule']}: {audit['action']})")
    finally:
        os.killpg(svc.pid, signal.SIGTERM)
        svc.wait(60)


def _ok(client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
