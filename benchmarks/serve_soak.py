"""Serving soak: many concurrent streams for a while, then an overload; the figures a user reads.

    .venv/bin/python benchmarks/serve_soak.py                       # 64 streams for 60 s, then overload
    .venv/bin/python benchmarks/serve_soak.py --duration 10         # a shorter smoke run

1. Soak: `wanka serve` (its own process, default limits: 32 running, 256 waiting) on loopback with the
   `tiny` preset (random weights), and `wanka loadtest`'s client keeping --concurrency streams in
   flight for --duration seconds, --max-tokens each. Goal: 0 errors and 0 rejections (64 streams fit
   in 32 + 256 places); printed: requests, tokens/s, TTFT and latency p50/p99.
2. Overload: a second server with --max-batch 4 --max-queue 4 and the same 64 streams for a tenth of
   the duration. Goal: the surplus is refused with 429 (back-pressure), never a 5xx, a broken stream
   or a hang (every request ends within the client's REQUEST_TIMEOUT_S).
The machine is shared: absolute latencies are noisy; the error and rejection counts are the result.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile

from wanka.serve.fixtures import write_random_export
from wanka.serve.loadtest import run_loadtest


LOG = None   # the servers' stderr: --server-log FILE keeps it (tracebacks of anything that went wrong)


def serve(export_dir: str, *flags: str):
    cmd = [sys.executable, "-m", "wanka", "serve", "--model", export_dir, "--port", "0", "--json", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=LOG, text=True)
    return proc, json.loads(proc.stdout.readline())["url"]


def report(name: str, row: dict) -> None:
    ms = lambda v: float("nan") if v is None else v * 1e3  # noqa: E731
    print(f"   {name}: {row['requests']} requests in {row['wall_s']:.1f} s, ok {row['ok']}, rejected (429) "
          f"{row['rejected']}, errors {row['errors']}; {row['tokens_per_s']:.0f} tokens/s; "
          f"TTFT p50 {ms(row['ttft_p50_s']):.0f} ms p99 {ms(row['ttft_p99_s']):.0f} ms; "
          f"latency p50 {ms(row['latency_p50_s']):.0f} ms p99 {ms(row['latency_p99_s']):.0f} ms")
    if row["first_error"]:
        print(f"      first refusal or error: {row['first_error']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--server-log", default=None, help="write the servers' stderr to this file")
    args = ap.parse_args()
    global LOG
    LOG = open(args.server_log, "w") if args.server_log else subprocess.DEVNULL
    export_dir = str(write_random_export(tempfile.mkdtemp(prefix="wanka-soak-"), "tiny", seed=0))
    for title, flags, duration in (("1. soak (default limits)", (), args.duration),
                                   ("2. overload (--max-batch 4 --max-queue 4)",
                                    ("--max-batch", "4", "--max-queue", "4"), args.duration / 10)):
        proc, url = serve(export_dir, *flags)
        try:
            run_loadtest(url, [4], 4, max_tokens=4)  # warm-up
            row = run_loadtest(url, [args.concurrency], None, args.max_tokens, duration_s=duration)["levels"][0]
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(120)
        print(f"\n{title}: {args.concurrency} streams for {duration:g} s, {args.max_tokens} tokens each")
        report("result", row)
        print(f"   server exit code after SIGTERM (drain): {code}")


if __name__ == "__main__":
    main()
