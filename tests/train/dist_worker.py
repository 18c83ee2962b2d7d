"""Runs several TrainConfigs in one torchrun launch (each launch costs 8-19 s on this machine).

    torchrun --nproc-per-node N tests/train/dist_worker.py OUT.json DATA_DIR CONFIG_JSON...

Rank 0 writes {"runs": [{"config", "losses", "result"}]} to OUT.json.
"""

import json
import sys
import warnings
from pathlib import Path

import torch.distributed as dist

from wanka.train.config import TrainConfig
from wanka.train.main import init_distributed
from wanka.train.trainer import Trainer

warnings.filterwarnings("ignore")


def main() -> None:
    out, data, configs = sys.argv[1], sys.argv[2], [json.loads(c) for c in sys.argv[3:]]
    rank, world = init_distributed(60)
    runs = []
    for config in configs:
        trainer = Trainer(TrainConfig.from_dict(config), rank, world, Path(data))
        result = trainer.fit()
        runs.append({"config": config, "losses": trainer.losses, "result": result})
    if rank == 0:
        Path(out).write_text(json.dumps({"runs": runs}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
