"""The `local` backend: each launch is `wanka train --max-restarts 0` on this machine.

A launch is a `/bin/sh` leader in its own session (pid = pgid, recorded in the DB with its start
time) that runs `wanka train` and writes the exit code to `CKPT/control/attempt-N.exit`, so the exit
is known even when the service that started it has died and been restarted (it is no longer the
parent then). torchrun and its workers start their own sessions (torch/distributed/elastic/
multiprocessing/subprocess_handler/subprocess_handler.py passes start_new_session=True), so a signal
to one process group does not reach them; every process of a launch instead carries the environment
tag WANKA_CONTROL_LAUNCH=JOB:ATTEMPT, and `stop` signals every process with that tag.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

TAG = "WANKA_CONTROL_LAUNCH"
_SCRIPT = 'exec >>"$WANKA_CONTROL_LOG" 2>&1; "$@"; rc=$?; echo $rc >"$WANKA_CONTROL_EXIT.tmp"; mv "$WANKA_CONTROL_EXIT.tmp" "$WANKA_CONTROL_EXIT"'


@dataclass(frozen=True)
class Launched:
    pid: int
    pgid: int
    proc_start: float  # psutil create_time of pid: a reused pid has another


def control_dir(ckpt: str) -> Path:
    return Path(ckpt) / "control"


def log_path(ckpt: str, attempt: int) -> Path:
    return control_dir(ckpt) / f"attempt-{attempt}.log"


def exit_path(ckpt: str, attempt: int) -> Path:
    return control_dir(ckpt) / f"attempt-{attempt}.exit"


def tag_of(job_id: int, attempt: int) -> str:
    return f"{job_id}:{attempt}"


class LocalBackend:
    name = "local"

    def __init__(self):
        self._children: dict[int, subprocess.Popen] = {}  # launches this process started (reaped on exit)

    def launch(self, job_id: int, attempt: int, ckpt: str, command: list[str]) -> Launched:
        control_dir(ckpt).mkdir(parents=True, exist_ok=True)
        exit_path(ckpt, attempt).unlink(missing_ok=True)
        env = {**os.environ, TAG: tag_of(job_id, attempt), "WANKA_CONTROL_LOG": str(log_path(ckpt, attempt)),
               "WANKA_CONTROL_EXIT": str(exit_path(ckpt, attempt)), "PYTHONWARNINGS": "ignore",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        proc = subprocess.Popen(["/bin/sh", "-c", _SCRIPT, "wanka-control-launch", *command], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self._children[proc.pid] = proc
        return Launched(proc.pid, proc.pid, psutil.Process(proc.pid).create_time())

    def alive(self, pid: int | None, proc_start: float | None) -> bool:
        """The launch's leader still runs (not exited, not a zombie, not a reused pid)."""
        if pid is None:
            return False
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]
            return False
        try:
            p = psutil.Process(pid)
            if proc_start is not None and abs(p.create_time() - proc_start) > 0.01:
                return False
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def exit_code(self, ckpt: str, attempt: int) -> int | None:
        """The exit code the leader wrote; None when it was killed before it could write one."""
        try:
            return int(exit_path(ckpt, attempt).read_text().strip())
        except (OSError, ValueError):
            return None

    def find(self, job_id: int, attempt: int) -> list[psutil.Process]:
        """Every live process of one launch, by its environment tag (re-adoption after a crash)."""
        want, out = tag_of(job_id, attempt), []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.environ().get(TAG) == want and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return out

    def stop(self, job_id: int, attempt: int, graceful_s: float = 20.0) -> int:
        """SIGTERM (graceful_s > 0) then SIGKILL every process of the launch; returns how many there were.
        Bounded: each wait is psutil.wait_procs with a timeout."""
        procs = self.find(job_id, attempt)
        if graceful_s > 0:
            for p in procs:
                _signal(p, signal.SIGTERM)
            _, procs_left = psutil.wait_procs(procs, timeout=graceful_s)
        else:
            procs_left = procs
        for p in procs_left:
            _signal(p, signal.SIGKILL)
        psutil.wait_procs(procs_left, timeout=30)
        for pid in [pid for pid, c in self._children.items() if c.poll() is not None]:
            del self._children[pid]
        return len(procs)


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


def wait_until(predicate, timeout_s: float, poll_s: float = 0.2):
    """Poll `predicate` until it returns a truthy value or timeout_s passes (then None): a bounded loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(poll_s)
