"""Fault -> detection -> resumed training under `wanka control up`, on real processes (tiny, dp=2, CPU).

    .venv/bin/python benchmarks/control_recovery.py [--hang-min-s 15] [--score-every-s 1]

For a killed rank and a hung rank it prints: seconds from the fault (the injector's marker file,
written just before it fires) to the supervisor's detection (audit detected_at), and to the
trainer's `restored` event of the relaunch (training resumed). The hang figure is dominated by the
rule's min_s by design. For a node that telemetry marks failing (a failing GPU series posted to
the API mid-run) it prints seconds from the post to the drain (audit detected_at; bounded by the
scorer's period) and from the undrain to resumed training. Figures depend on this machine's load; they are printed, not asserted.
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
    ap.add_argument("--score-every-s", type=float, default=1.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wanka-ctl-bench-"))
    prepare(write_corpus(root / "text", n_sentences=4000), root / "shards")
    (root / "rules.yaml").write_text(f"hang: {{factor: 20, min_s: {args.hang_min_s}, startup_grace_s: 600}}\n"
                                     f"node_risk: {{score_every_s: {args.score_every_s}}}\n")
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
        telemetry_fault(client, root)
    finally:
        os.killpg(svc.pid, signal.SIGTERM)
        svc.wait(60)


def telemetry_fault(client, root: Path) -> None:
    ckpt = root / "telemetry"
    body = {"layout": "dp=2,precision=fp32,gbs=4,mbs=2", "seq_len": 64, "steps": 10, "ckpt_every": 3,
            "data": str(root / "shards"), "ckpt": str(ckpt), "inject": [f"slow@step={s},rank=0" for s in range(3, 11)]}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    wait(lambda: (ckpt / "metrics.jsonl").exists() and len((ckpt / "metrics.jsonl").read_text().splitlines()) >= 4,
         600, "step 4")  # past the checkpoint of step 3: the relaunch restores it
    now = time.time()
    samples = [{"ts": now - (7 - k / 6) * 3600, "metrics": {  # a GPU warming 60 -> 74 C over 6 h, ECC and XID growing
        "gpu0_temp_C": 74.0 - 14.0 * min(7 - k / 6, 6.0) / 6.0, "gpu0_ecc_corrected_total": 10.0 * k / 6,
        "gpu0_xid_total": float(int(0.5 * k / 6))}} for k in range(43)]
    posted_s = time.time()
    client.post("/v1/nodes/local/telemetry", json={"samples": samples}).raise_for_status()
    job = wait(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] == "queued" and j, 300, "the drain")
    drain = next(a for a in job["audit"] if a["rule"] == "node_risk")
    undrained_s = time.time()
    client.post("/v1/nodes/local/undrain").raise_for_status()
    job = wait(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in ("succeeded", "failed") and j,
               900, "telemetry job")
    events = [json.loads(l) for l in (ckpt / "events.jsonl").read_text().splitlines()]
    resumed_s = min(e["time"] for e in events if e["event"] == "restored" and e["time"] > undrained_s)
    print(f"telemetry: state {job['state']}, post -> drain {drain['detected_at'] - posted_s:6.2f} s, undrain -> "
          f"resumed training {resumed_s - undrained_s:6.2f} s ({drain['detection']})")


def _ok(client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
