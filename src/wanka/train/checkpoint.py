"""Atomic, verified, resharding checkpoints on torch.distributed.checkpoint (DCP).

Layout of a checkpoint directory `CKPT/`:
    step_00000020/            committed checkpoint (DCP files .distcp + .metadata)
        train_state.json      step, sampler state, LR scale, spike count (rank 0)
        rng/rank{r}.pt        torch RNG state of each rank
        rank_state/rank{r}.pt per-rank training state outside the model (PowerSGD error feedback), when any
        manifest.json         written LAST: {"step", "files": {relpath: sha256}, "world_size"}
    step_00000025.tmp/        a save in flight or one that died: never loaded, removed on next save

Commit protocol: all ranks write into step_N.tmp; when DCP's finish step (which gathers every
rank's write results on the coordinator) has returned on rank 0, rank 0 hashes every file,
fsyncs files and directory, writes manifest.json, and renames .tmp -> final (rename is atomic on
POSIX), then fsyncs the parent and deletes all but the newest `keep` checkpoints. Load walks the
committed checkpoints newest first and takes the first whose files match the manifest, so a
corrupt newest checkpoint falls back to the one before. DCP stores tensors by fully-qualified
name with their global shapes, so a checkpoint saved by 4 ranks loads on 2 (resharding).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import warnings
from contextlib import contextmanager

import torch

from wanka.errors import SpecError


# An async save without a process group warns from its writer thread, outside any catch_warnings.
warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")


@contextmanager
def _quiet_single_process():
    """DCP warns "assuming the intent is to save in a single process" without a process group."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield

_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(tmp: Path, final: Path, step: int, world_size: int) -> None:
    """Hash + fsync every file of `tmp`, write manifest.json, rename to `final` (rank 0 only)."""
    files = {}
    for p in sorted(tmp.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
            files[str(p.relative_to(tmp))] = _sha256(p)
    manifest = tmp / "manifest.json"
    with open(manifest, "w") as f:
        json.dump({"format": "wanka-ckpt-v1", "step": step, "world_size": world_size, "files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    for d in {p.parent for p in tmp.rglob("*")} | {tmp}:
        _fsync_dir(d)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(final.parent)


def verify(path: Path) -> str | None:
    """None when `path` is a complete checkpoint matching its manifest, else the reason."""
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        files = manifest["files"]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):  # ValueError: not UTF-8, not JSON
        return "missing or unreadable manifest.json"
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        return "manifest.json: files is not a mapping of file name to sha256"
    if ".metadata" not in files:
        return "no DCP .metadata in manifest"
    for rel, digest in files.items():
        p = path / rel
        if not p.is_file():
            return f"missing file {rel}"
        if _sha256(p) != digest:
            return f"checksum mismatch in {rel}"
    return None


def committed(root: Path) -> list[tuple[int, Path]]:
    """Committed checkpoint dirs, newest first (not verified)."""
    if not root.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(out, reverse=True)


def latest_valid(root: Path, log=print) -> tuple[int, Path] | None:
    """Newest checkpoint that verifies; logs every one it skips and why."""
    for step, path in committed(root):
        reason = verify(path)
        if reason is None:
            return step, path
        log({"event": "checkpoint_invalid", "path": str(path), "reason": reason})
    return None


def check_ckpt_dir(root: Path, spec=None) -> None:
    """Before launching: `root` is a directory (or can be one), and when it already holds a valid
    checkpoint, that checkpoint is of the same architecture as `spec` (a ModelSpec) - otherwise every
    worker would fail to load it, once per elastic restart."""
    if root.exists() and not root.is_dir():
        raise SpecError("ckpt", "a directory (or a path to create)", str(root))
    if spec is None:
        return
    found = latest_valid(root, log=lambda _: None)
    if found is None:
        return
    try:
        saved = json.loads((found[1] / "train_state.json").read_text())["model_spec"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return  # verify() passed, so this is an older format; the workers decide
    now = spec.model_dump()
    ignore = {"name", "seq_len", "notes"}  # no effect on parameter shapes
    diff = sorted(k for k in set(saved) | set(now) if k not in ignore and saved.get(k) != now.get(k))
    if diff:
        raise SpecError("ckpt", f"a fresh directory, or one whose checkpoints are of this model "
                        f"({found[1].name} holds {saved.get('name')!r}; differs in {', '.join(diff)})", str(root))


class Checkpointer:
    """Save (sync or async) with atomic commit; keep the newest `keep` checkpoints."""

    def __init__(self, root: Path, rank: int, world_size: int, keep: int = 3, async_save: bool = False, pg=None, log=print):
        if keep < 1:
            raise SpecError("keep", "an integer >= 1", keep)
        self.root, self.rank, self.world_size, self.keep = Path(root), rank, world_size, keep
        self.async_save, self.pg, self.log = async_save, pg, log
        self._pending: tuple | None = None
        self.on_commit = None  # (step, path) -> None, rank 0 after each commit (fault injection)
        self._stager = None  # persistent, so staged CPU buffers are allocated once and reused
        self.loaded_rank_state: dict | None = None  # the last load()'s rank_state
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)

    def save(self, step: int, state: dict, train_state: dict, before_commit=None, rank_state: dict | None = None) -> None:
        """`rank_state`: this rank's own picklable state (not resharded: it loads on the same rank)."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        self.wait()  # one save in flight at a time
        tmp = self.root / f"step_{step:08d}.tmp"
        if self.rank == 0:
            for stale in self.root.glob("*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
            tmp.mkdir(parents=True)
            (tmp / "train_state.json").write_text(json.dumps(train_state))
        if dist.is_initialized():
            dist.barrier(group=self.pg)
        (tmp / "rng").mkdir(exist_ok=True)
        torch.save(torch.get_rng_state(), tmp / "rng" / f"rank{self.rank}.pt")
        if rank_state is not None:
            (tmp / "rank_state").mkdir(exist_ok=True)
            torch.save(rank_state, tmp / "rank_state" / f"rank{self.rank}.pt")
        if self.async_save:
            with _quiet_single_process():
                fut = dcp.async_save(state, checkpoint_id=str(tmp), process_group=self.pg, async_stager=self._get_stager())
            self._pending = (fut, step, tmp, before_commit)
        else:
            with _quiet_single_process():
                dcp.save(state, checkpoint_id=str(tmp), process_group=self.pg)
            self._finish(step, tmp, before_commit)

    def _get_stager(self):
        """DCP's default stager copies into fresh shared memory on every save (~0.5 s for 11 MB on
        this machine); a kept stager without shared memory reuses its buffers (a memcpy)."""
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        if self._stager is None:
            cuda = torch.cuda.is_available()
            self._stager = DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False,
                                                        use_async_staging=cuda, use_non_blocking_copy=cuda))
        return self._stager

    def close(self) -> None:
        self.wait()
        if self._stager is not None:
            self._stager.close()
            self._stager = None

    def poll(self) -> None:
        """Commit a finished async save without blocking."""
        if self._pending and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        if self._pending:
            fut, step, tmp, hook = self._pending
            self._pending = None
            fut.result()
            self._finish(step, tmp, hook)

    def _finish(self, step: int, tmp: Path, hook) -> None:
        if hook:
            hook(step, tmp)  # fault injection: die between writing and committing
        if self.rank != 0:
            return
        commit(tmp, step_dir(self.root, step), step, self.world_size)
        self.log({"event": "checkpoint_committed", "step": step, "path": str(step_dir(self.root, step))})
        if self.on_commit:
            self.on_commit(step, step_dir(self.root, step))
        for _, old in committed(self.root)[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)

    def load(self, state: dict, log=print) -> tuple[int, dict] | None:
        """Load the newest valid checkpoint into `state` in place; returns (step, train_state) or None."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        choice = [None]
        if self.rank == 0:
            found = latest_valid(self.root, log)
            choice = [None if found is None else str(found[1])]
        if dist.is_initialized():
            dist.broadcast_object_list(choice, src=0, group=self.pg)
        if choice[0] is None:
            return None
        path = Path(choice[0])
        with _quiet_single_process():
            dcp.load(state, checkpoint_id=str(path), process_group=self.pg)
        rng = path / "rng" / f"rank{self.rank}.pt"
        torch.set_rng_state(torch.load(rng if rng.is_file() else path / "rng" / "rank0.pt"))
        self.loaded_rank_state = self._rank_state(path)
        return int(path.name.split("_")[1]), json.loads((path / "train_state.json").read_text())

    def _rank_state(self, path: Path) -> dict | None:
        """This rank's `rank_state` of the checkpoint at `path` (None when it has none). Unpickled
        in full (weights_only=False): the file is our own and its SHA-256 matched the manifest."""
        f = path / "rank_state" / f"rank{self.rank}.pt"
        return torch.load(f, weights_only=False) if f.is_file() else None
