"""Worker entry point under torchrun (one process per rank), or plain python for 1 process.

    torchrun --nproc-per-node 4 -m wanka.train.main --config run.json --data DIR
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        -m wanka.train.main --config run.json --data DIR

`wanka train` writes run.json and starts torchrun for you. Rank 0 writes CKPT/result.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path


def init_distributed(timeout_s: float) -> tuple[int, int]:
    """Process group from torchrun's env. Each elastic attempt gets its own key prefix: gloo's old
    keys left in the agent's store otherwise make re-rendezvous fail (torch_cpu_probe.md gotcha 1)."""
    import torch
    import torch.distributed as dist

    if "RANK" not in os.environ:
        return 0, 1
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False, timeout=timeout)
    prefix = f"wanka/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"  # async DCP needs a CPU backend
    dist.init_process_group(backend, store=dist.PrefixStore(prefix, store), rank=rank, world_size=world, timeout=timeout)
    return rank, world


def run(config: dict, data_dir: str) -> dict:
    import torch.distributed as dist

    from wanka.train.config import TrainConfig
    from wanka.train.trainer import Trainer

    cfg = TrainConfig.from_dict(config)
    rank, world = init_distributed(cfg.collective_timeout_s)
    try:
        result = Trainer(cfg, rank, world, Path(data_dir)).fit()
        if rank == 0:
            tmp = Path(cfg.ckpt) / "result.json.tmp"
            tmp.write_text(json.dumps(result))
            os.replace(tmp, Path(cfg.ckpt) / "result.json")
        return result
    finally:
        if dist.is_initialized():
            dist.barrier()  # before destroy: avoids a rare SIGABRT at exit (torch_cpu_probe.md gotcha 3)
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wanka.train.main")
    parser.add_argument("--config", help="run.json written by `wanka train` (TrainConfig fields)")
    parser.add_argument("--data", required=True, help="prepared shards directory")
    for key in ("model", "layout", "ckpt"):
        parser.add_argument(f"--{key}", help=f"override TrainConfig.{key}")
    parser.add_argument("--steps", type=int, help="override TrainConfig.steps")
    args = parser.parse_args(argv)
    from wanka.errors import SpecError

    config = json.loads(Path(args.config).read_text()) if args.config else {}
    config.update({k: getattr(args, k) for k in ("model", "layout", "ckpt", "steps") if getattr(args, k) is not None})
    try:
        run(config, args.data)
    except SpecError as exc:
        sys.stderr.write(f"wanka: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
