"""`wanka data prepare` on generated text with planted duplicates: peak memory, tokens/s for 1 vs 2
worker processes, duplicates found vs planted.

    .venv/bin/python benchmarks/data_prepare.py                 # 1 GB (the issue's size)
    .venv/bin/python benchmarks/data_prepare.py --size 50MB     # a quick run

The generator streams JSONL files of ~2 KB documents (random words), and after each unique
document plants, with probability --dup-rate each, an exact copy or a near copy (one word of ~300
changed, Jaccard of the 5-gram sets ~0.97) of a random recent document. Each run is a separate
`wanka data prepare` process; peak RSS is the largest sum over that process tree, sampled every
0.1 s from /proc (a sampled peak: it can miss a spike shorter than that), plus the kernel's
ru_maxrss of the largest single process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS_PER_DOC = 300


def parse_size(text: str) -> int:
    units = {"KB": 1e3, "MB": 1e6, "GB": 1e9}
    for u, f in units.items():
        if text.upper().endswith(u):
            return int(float(text[: -len(u)]) * f)
    return int(text)


def generate(dst: Path, size: int, dup_rate: float, seed: int = 0, files: int = 8) -> dict:
    """Write ~size bytes of JSONL into dst; returns the planted counts."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(30000)]
    recent: list[list[str]] = [[] for _ in range(files)]  # copies stay in their original's file, after it
    planted = {"exact": 0, "near": 0, "unique": 0}
    written, handles = 0, [open(dst / f"part{k:02d}.jsonl", "w") for k in range(files)]
    k = 0
    while written < size:
        mine = recent[k % files]
        doc = " ".join(rng.choices(vocab, k=WORDS_PER_DOC))
        batch = [doc]
        planted["unique"] += 1
        if mine and rng.random() < dup_rate:
            batch.append(rng.choice(mine))
            planted["exact"] += 1
        if mine and rng.random() < dup_rate:
            words = rng.choice(mine).split()
            words[rng.randrange(len(words))] = "changed"
            batch.append(" ".join(words))
            planted["near"] += 1
        mine.append(doc)
        if len(mine) > 500:
            mine.pop(rng.randrange(len(mine)))
        for d in batch:
            line = json.dumps({"text": d}) + "\n"
            handles[k % files].write(line)
            written += len(line)
        k += 1
    for h in handles:
        h.close()
    return planted


def _tree_rss_bytes(root: int) -> int:
    """Sum of VmRSS over `root` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def run_prepare(src: Path, out: Path, workers: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "wanka", "data", "prepare", str(src), "--out", str(out), "--workers", str(workers),
           "--shard-tokens", str(1 << 24), "--json", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_bytes(proc.pid))
        time.sleep(0.1)
    stdout, stderr = proc.communicate()
    if proc.returncode:
        raise SystemExit(stderr.strip().splitlines()[-1])
    result = json.loads(stdout)
    result.update(wall_s=time.perf_counter() - t0, peak_tree_rss=peak,
                  max_single_rss=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1GB", help="generated text, e.g. 1GB, 50MB")
    ap.add_argument("--dup-rate", type=float, default=0.05, help="chance per unique document of each kind of copy")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--tokenizer", help="tokenizer.json (default: byte)")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    args = ap.parse_args()
    size = parse_size(args.size)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        t0 = time.perf_counter()
        planted = generate(src, size, args.dup_rate)
        print(f"generated {size / 1e6:,.0f} MB in {time.perf_counter() - t0:.0f} s: {planted['unique']:,} unique documents, "
              f"planted {planted['exact']:,} exact and {planted['near']:,} near copies")
        extra = ["--tokenizer", args.tokenizer] if args.tokenizer else []
        base = None
        for w in [int(x) for x in args.workers.split(",")]:
            r = run_prepare(src, Path(tmp) / f"out{w}", w, extra)
            total = {k: sum(s.get(k, 0) for s in r["sources"]) for k in ("exact_duplicates", "near_duplicates", "kept")}
            tps = r["tokens"] / r["seconds"]
            base = base or tps
            print(f"workers={w}: {r['tokens']:,} tokens in {r['seconds']:.1f} s = {tps:,.0f} tokens/s "
                  f"({tps / base:.2f}x workers={args.workers.split(',')[0]}); peak RSS (process tree, sampled) "
                  f"{r['peak_tree_rss'] / 2**20:,.0f} MiB, largest single process {r['max_single_rss'] / 2**20:,.0f} MiB")
            print(f"  duplicates found: exact {total['exact_duplicates']:,} / planted {planted['exact']:,}, "
                  f"near {total['near_duplicates']:,} / planted {planted['near']:,}; kept {total['kept']:,} "
                  f"/ unique {planted['unique']:,}")


if __name__ == "__main__":
    main()
