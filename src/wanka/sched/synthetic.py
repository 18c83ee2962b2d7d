"""Synthetic job mixes for 10k-GPU clusters, drawn from a seed (docs/sched.md "Synthetic mixes").

No public trace comes from a >= 10k-GPU cluster and none has jobs of >= 2,048 GPUs
(sched_network.md section 1.4), so the large gangs below are assumptions, not measurements. The
small-job side is calibrated loosely on the Acme/Helios summaries (median job 1 GPU; Kalos, an LLM
cluster: mean 26.8 GPUs per job, max 1,024; mean run 1,260-1,414 s for Seren/Kalos):

| class    | share of jobs | GPUs                          | duration (lognormal median, range) | priority | ckpt   |
|----------|---------------|-------------------------------|------------------------------------|----------|--------|
| pretrain | 0.5 %         | 1,024 / 2,048 / 4,096 / 8,192 | 2 days, 6 h - 14 days              | 2        | 1 h    |
| finetune | 14.5 %        | 8 - 256 (powers of two)       | 3 h, 10 min - 2 days               | 1        | 30 min |
| eval     | 85 %          | 1 / 2 / 4 / 8                 | 20 min, 1 min - 6 h                | 0        | none   |

A third of fine-tunes are elastic between half and twice their size. Arrivals are Poisson with the
rate that offers `load` x cluster GPUs on average (offered GPU-s per second / GPUs).
"""

from __future__ import annotations

import math

import numpy as np

from wanka.errors import SpecError
from wanka.sched.job import Job

CLASSES = {  # name: (share, sizes, median_s, min_s, max_s, priority, checkpoint_s)
    "pretrain": (0.005, (1024, 2048, 4096, 8192), 2 * 86400, 6 * 3600, 14 * 86400, 2, 3600.0),
    "finetune": (0.145, (8, 16, 32, 64, 128, 256), 3 * 3600, 600, 2 * 86400, 1, 1800.0),
    "eval": (0.85, (1, 2, 4, 8), 1200, 60, 6 * 3600, 0, None),
}
SIGMA = 1.0  # lognormal shape of durations (an assumption)


def synthetic_mix(cluster_gpus: int, jobs: int = 2000, seed: int = 0, load: float = 0.8) -> list[Job]:
    if not isinstance(jobs, int) or jobs < 1:
        raise SpecError("--jobs", "an integer >= 1", jobs)
    if not (isinstance(load, (int, float)) and math.isfinite(load) and load > 0):
        raise SpecError("--load", "a number > 0 (offered GPUs / cluster GPUs)", load)
    rng = np.random.default_rng(seed)
    names = list(CLASSES)
    shares = np.array([CLASSES[n][0] for n in names])
    kind = rng.choice(len(names), size=jobs, p=shares / shares.sum())
    specs = []
    for i in range(jobs):
        name = names[kind[i]]
        _, sizes, median, lo, hi, prio, ckpt = CLASSES[name]
        fitting = [g for g in sizes if g <= cluster_gpus] or [min(sizes[0], cluster_gpus)]
        gpus = int(rng.choice(fitting))
        dur = float(np.clip(median * math.exp(SIGMA * rng.standard_normal()), lo, hi))
        elastic = name == "finetune" and rng.random() < 1 / 3
        specs.append((name, gpus, dur, prio, ckpt, elastic))
    mean_gpu_s = sum(g * d for _, g, d, *_ in specs) / jobs
    rate = load * cluster_gpus / mean_gpu_s  # jobs per second
    gaps = rng.exponential(1 / rate, size=jobs)
    gaps[0] = 0.0
    submit = np.cumsum(gaps)
    out = []
    for i, (name, gpus, dur, prio, ckpt, elastic) in enumerate(specs):
        kw = {}
        if elastic:
            kw = {"min_gpus": max(1, gpus // 2), "max_gpus": min(cluster_gpus, gpus * 2)}
        out.append(Job(id=f"{name}-{i}", gpus=gpus, submit_s=float(submit[i]), duration_s=round(dur, 1),
                       priority=prio, tenant=name, checkpoint_interval_s=ckpt, **kw))
    return out
