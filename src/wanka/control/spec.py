"""What a user submits (`JobSpec`, validated like every wanka input) and how it becomes `wanka train`.

A job runs `wanka train` with `--max-restarts 0`: torchrun does not restart a dead rank itself; the
control plane sees the exit, decides, and relaunches from the newest checkpoint (docs/control.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wanka.errors import SpecError, from_pydantic


class JobSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default="tiny", min_length=1, max_length=200)
    layout: str = Field(default="", max_length=200)
    nproc: int | None = Field(default=None, ge=1, le=4096)  # None: the product of the layout's degrees
    steps: int = Field(ge=1, le=10_000_000)
    ckpt: str = Field(min_length=1, max_length=4096)  # absolute path on the node (a shared filesystem)
    priority: int = Field(default=0, ge=-1000, le=1000)
    seed: int = Field(default=0, ge=0)
    seq_len: int | None = Field(default=None, ge=2)
    ckpt_every: int = Field(default=5, ge=1)
    lr: float = Field(default=3e-3, gt=0, le=1.0)
    data: str | None = None
    inject: list[str] = Field(default_factory=list, max_length=16)
    # a stuck collective fails after this; the control plane's hang rule is meant to act first
    collective_timeout: float = Field(default=600.0, gt=0)

    def checked(self) -> "JobSpec":
        """Resolve nproc and check model, layout and injections as `wanka train` would (SpecError)."""
        from wanka.layout import Layout
        from wanka.train.fault import Injection
        from wanka.train.parallel_dims import ParallelDims
        from wanka.workload.spec import load_model

        if not Path(self.ckpt).is_absolute():
            raise SpecError("ckpt", "an absolute path (the service resolves nothing against its own directory)", self.ckpt)
        if self.data is not None and not Path(self.data).is_dir():
            raise SpecError("data", "a prepared shards directory on this node", self.data)
        spec = load_model(self.model, **({"seq_len": self.seq_len} if self.seq_len else {}))
        layout = Layout.parse(self.layout)
        nproc = self.nproc or layout.model_parallel * (layout.dp or 1)
        ParallelDims.from_layout(layout, nproc, spec)
        for text in self.inject:
            inj = Injection.parse(text)
            if inj.rank is not None and inj.rank >= nproc:
                raise SpecError("inject", f"rank < nproc ({nproc})", text)
        return self.model_copy(update={"nproc": nproc})

    def train_args(self) -> dict:
        return self.model_dump(exclude={"model", "layout", "nproc", "steps", "ckpt", "priority"})


def parse_job_spec(data: dict) -> JobSpec:
    try:
        return JobSpec(**data).checked()
    except ValidationError as exc:
        raise from_pydantic(exc) from None
    except TypeError as exc:
        raise SpecError("job", "a mapping of JobSpec fields", str(exc)) from None


def train_command(job: dict, lr_scale: float = 1.0) -> list[str]:
    """The `wanka train` command line of one launch of `job` (a jobs row as a dict)."""
    a = job["train_args"]
    cmd = [sys.executable, "-m", "wanka", "train", "--json", "--model", job["model"], "--layout", job["layout"],
           "--nproc", str(job["nproc"]), "--steps", str(job["steps"]), "--ckpt", job["ckpt"], "--max-restarts", "0",
           "--seed", str(a["seed"]), "--ckpt-every", str(a["ckpt_every"]), "--lr", repr(a["lr"] * lr_scale),
           "--collective-timeout", repr(a["collective_timeout"])]
    if a.get("seq_len"):
        cmd += ["--seq-len", str(a["seq_len"])]
    if a.get("data"):
        cmd += ["--data", a["data"]]
    for inj in a.get("inject", []):
        cmd += ["--inject", inj]
    return cmd
