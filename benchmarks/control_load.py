"""N concurrent API clients for S seconds against a real `wanka control up` on loopback (issue 12:
100 clients for 60 s, no 5xx).

    .venv/bin/python benchmarks/control_load.py [--clients 100] [--seconds 60] [--db URL]

The node is drained first, so submitted jobs queue and never launch: the load is the API and the DB,
not training. Half the clients act as user alice, half as bob; each loops over a mix of
- reads: list jobs, show its own job, the dashboard overview, its job's metrics, /metrics;
- bad submits (a missing, mistyped, out-of-range or unknown field): expected 422 naming that field;
- cross-user attempts: show and cancel the other user's job, expected 404;
- every 10th pass, a valid submit: expected 201.
Prints counts per status class, requests/s and p50/p99 latency; exits 1 on any 5xx, transport error
or answer other than the expected one. The service is stopped (SIGTERM, bounded wait) at the end.
"""

import argparse
import asyncio
import collections
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BAD_SUBMITS = [  # (body, the field the 422 must name)
    ({"layout": "dp=2", "ckpt": "/tmp/x"}, "steps"),
    ({"layout": "dp=2", "steps": "many", "ckpt": "/tmp/x"}, "steps"),
    ({"layout": "dp=2", "steps": 2, "ckpt": "/tmp/x", "priority": 10**6}, "priority"),
    ({"layout": "dp=2", "steps": 2, "ckpt": "/tmp/x", "colour": "red"}, "colour"),
    ({"layout": "dp=2", "steps": 2, "ckpt": "relative/dir"}, "ckpt"),
]


class Tally:
    def __init__(self):
        self.classes: collections.Counter = collections.Counter()
        self.unexpected: collections.Counter = collections.Counter()
        self.latency_s: list[float] = []

    async def call(self, kind: str, request, expect) -> None:
        """Send one request; count its status class and whether `expect(response)` held."""
        t0 = time.perf_counter()
        try:
            r = await request
        except httpx.HTTPError as exc:
            self.classes[type(exc).__name__] += 1
            self.unexpected[f"{kind}: {type(exc).__name__}"] += 1
            return
        self.latency_s.append(time.perf_counter() - t0)
        self.classes[f"{r.status_code // 100}xx"] += 1
        if not expect(r):
            self.unexpected[f"{kind}: {r.status_code} {r.text[:120]}"] += 1


def names_field(field):
    return lambda r: r.status_code == 422 and r.json().get("field") == field


async def client_loop(url, token, own_job, other_job, deadline, tally, ckpt_root, n):
    ok = lambda r: r.status_code == 200  # noqa: E731
    gone = lambda r: r.status_code == 404  # noqa: E731
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            body, field = BAD_SUBMITS[(n + i) % len(BAD_SUBMITS)]
            await tally.call("list", c.get("/v1/jobs"), ok)
            await tally.call("show", c.get(f"/v1/jobs/{own_job}"), ok)
            await tally.call("dashboard", c.get("/v1/dashboard"), ok)
            await tally.call("series", c.get(f"/v1/jobs/{own_job}/metrics"), ok)
            await tally.call("bad submit", c.post("/v1/jobs", json=body), names_field(field))
            await tally.call("cross-user show", c.get(f"/v1/jobs/{other_job}"), gone)
            await tally.call("cross-user cancel", c.post(f"/v1/jobs/{other_job}/cancel"), gone)
            await tally.call("metrics", c.get("/metrics"), ok)
            if i % 10 == 1:
                valid = {"layout": "dp=2", "steps": 5, "ckpt": f"{ckpt_root}/c{n}-{i}"}
                await tally.call("submit", c.post("/v1/jobs", json=valid), lambda r: r.status_code == 201)


def start_service(root: Path, db: str | None) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "wanka", "control", "up", "--port", str(port), "--slots", "2", "--state-dir",
           str(root / "state")] + (["--db", db] if db else [])
    svc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(root / "service.log", "w"), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return svc, url
        except httpx.HTTPError:
            pass
        if svc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("service did not start: " + (root / "service.log").read_text())
        time.sleep(0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--db", help="database URL (default: SQLite in a temp dir)")
    args = ap.parse_args()
    if args.clients < 1 or args.seconds <= 0:
        ap.error("--clients: expected >= 1; --seconds: expected > 0")
    root = Path(tempfile.mkdtemp(prefix="wanka-ctl-load-"))
    svc, url = start_service(root, args.db)
    try:
        admin = {"Authorization": f"Bearer {(root / 'state' / 'admin.token').read_text().strip()}"}
        httpx.post(url + "/v1/nodes/local/drain", headers=admin, timeout=60).raise_for_status()
        tokens, jobs = {}, {}
        for user in ("alice", "bob"):
            tokens[user] = httpx.post(url + "/v1/tokens", json={"user": user}, headers=admin, timeout=60).json()["token"]
            r = httpx.post(url + "/v1/jobs", json={"layout": "dp=2", "steps": 5, "ckpt": str(root / "jobs" / user)},
                           headers={"Authorization": f"Bearer {tokens[user]}"}, timeout=60)
            r.raise_for_status()
            jobs[user] = r.json()["id"]
        tally = Tally()
        t0 = time.monotonic()

        async def run_all():
            end = t0 + args.seconds
            users = [("alice", "bob"), ("bob", "alice")]
            await asyncio.gather(*(client_loop(url, tokens[me], jobs[me], jobs[other], end, tally, root / "jobs", n)
                                   for n in range(args.clients) for me, other in [users[n % 2]]))

        asyncio.run(run_all())
        elapsed = time.monotonic() - t0
    finally:
        os.killpg(svc.pid, signal.SIGTERM)
        svc.wait(60)
    total = sum(tally.classes.values())
    lat = sorted(tally.latency_s)
    p50 = statistics.median(lat) if lat else float("nan")
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    print(f"{args.clients} clients, {elapsed:.1f} s, db {(args.db or 'sqlite').split(':')[0]}: {total} requests ({total / elapsed:.0f}/s)")
    print("status classes: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.classes.items())))
    print(f"latency p50 {p50 * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms")
    failures = sum(v for k, v in tally.classes.items() if not (k[0].isdigit() and k[0] in "24"))
    if tally.unexpected:
        print("unexpected answers: " + "; ".join(f"{k} x{v}" for k, v in tally.unexpected.most_common(10)))
    print("OK: no 5xx, every answer as expected" if not (failures or tally.unexpected) else "FAIL")
    sys.exit(1 if failures or tally.unexpected else 0)


if __name__ == "__main__":
    main()
