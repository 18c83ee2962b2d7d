"""Two torchrun agents (--nnodes=2, one process each) meet through c10d rendezvous on 127.0.0.1,
as two nodes would, and train dp=2 to the same loss as one process."""

import json
import socket
import subprocess
import sys

import pytest

from wanka.train.config import TrainConfig
from wanka.train.trainer import Trainer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(180)
def test_two_agents_c10d_rendezvous(corpus_dir, tmp_path):
    cfg = {"model": "tiny", "layout": "dp=2,precision=fp32,gbs=4,mbs=2", "steps": 6, "seq_len": 64,
           "ckpt_every": 3, "ckpt": str(tmp_path / "ckpt")}
    (tmp_path / "run.json").write_text(json.dumps(cfg))
    port = _free_port()
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                                f"--node-rank={n}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                                "--rdzv-id=wanka-two-nodes", "-m", "wanka.train.main", "--config",
                                str(tmp_path / "run.json"), "--data", str(corpus_dir)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in range(2)]
    outs = [a.communicate(timeout=150)[0] for a in agents]
    assert all(a.returncode == 0 for a in agents), outs[0][-2000:] + outs[1][-2000:]
    result = json.loads((tmp_path / "ckpt" / "result.json").read_text())
    assert result["world_size"] == 2 and result["steps"] == 6
    single = Trainer(TrainConfig(**{**cfg, "layout": "precision=fp32,gbs=4,mbs=2", "ckpt": str(tmp_path / "one")}),
                     0, 1, corpus_dir)
    single.fit()
    assert result["final_loss"] == pytest.approx(single.losses[-1], rel=1e-4)
