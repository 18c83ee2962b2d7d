"""N concurrent API clients for S seconds against `wanka control up` on loopback; counts status codes.

    .venv/bin/python benchmarks/control_load.py [--clients 100] [--seconds 60] [--db URL]

The node is drained first, so submitted jobs queue and never launch (the load is the API and the
DB, not training); each client loops: list jobs, show one, submit a valid job, submit a bad one
(422 expected), read /metrics. Issue 12's goal: no 5xx. Prints requests/s and the code histogram.
"""

import argparse
import asyncio
import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


async def client_loop(url, token, deadline, codes, ckpt_root, n):
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            try:
                reqs = [c.get("/v1/jobs"), c.get("/v1/jobs/1"),
                        c.post("/v1/jobs", json={"layout": "dp=2", "steps": 5, "ckpt": f"{ckpt_root}/c{n}-{i}"}),
                        c.post("/v1/jobs", json={"layout": "dp=2", "steps": -1, "ckpt": "/x"}), c.get("/metrics")]
                for r in reqs:
                    codes[(await r).status_code] += 1
            except httpx.HTTPError as exc:
                codes[type(exc).__name__] += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--db", help="database URL (default: SQLite in a temp dir)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="wanka-ctl-load-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "wanka", "control", "up", "--port", str(port), "--slots", "2", "--state-dir",
           str(root / "state")] + (["--db", args.db] if args.db else [])
    svc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(root / "service.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("service did not start: " + (root / "service.log").read_text())
            time.sleep(0.3)
        token = (root / "state" / "admin.token").read_text().strip()
        httpx.post(url + "/v1/nodes/local/drain", headers={"Authorization": f"Bearer {token}"}).raise_for_status()
        codes: collections.Counter = collections.Counter()
        t0 = time.monotonic()

        async def run_all():
            end = t0 + args.seconds
            await asyncio.gather(*(client_loop(url, token, end, codes, root / "jobs", n) for n in range(args.clients)))

        asyncio.run(run_all())
        elapsed = time.monotonic() - t0
        total = sum(codes.values())
        errors_5xx = sum(v for k, v in codes.items() if isinstance(k, int) and k >= 500)
        print(f"{args.clients} clients, {elapsed:.1f} s: {total} requests ({total / elapsed:.0f}/s); codes {dict(codes)}; "
              f"5xx {errors_5xx}")
    finally:
        os.killpg(svc.pid, signal.SIGTERM)
        svc.wait(60)


if __name__ == "__main__":
    main()
