"""What the supervisor asks of a backend (`local`, `slurm`, `k8s`), and what every backend shares.

A *launch* is one attempt of one job: `wanka train --max-restarts 0` run somewhere. The supervisor
commits a launch as `launching` before `launch()` and as `running` with the returned `Launched`
after; from then on it only asks the backend about that jobs row:

| method | local (local_backend.py) | slurm (slurm_backend.py) | k8s (k8s_backend.py) |
|---|---|---|---|
| `launch` | `/bin/sh` leader in its own session | `sbatch` of `CKPT/control/attempt-N.sbatch` | `kubectl apply` of a JobSet |
| `alive` | leader pid runs (same start time) | `squeue` state pending/running, else `sacct` | `kubectl get jobset`: no Completed/Failed condition |
| `started_at` | the leader's start time | `squeue` StartTime (None while pending) | first seen ready (None while pending) |
| `exit_code` | `CKPT/control/attempt-N.exit` | that file, else `sacct` ExitCode | that file, else Completed -> 0 |
| `adopt` | processes tagged `JOB:ATTEMPT` | `squeue --name wanka-JOB-ATTEMPT` | the JobSet `wanka-JOB-ATTEMPT-HASH` |
| `stop` | SIGTERM/SIGKILL every tagged process | `scancel` (`--signal=KILL` for a hang) | `kubectl delete jobset` (+ forced pod delete for a hang) |
| `drain`/`undrain` | nothing to tell | `scontrol update nodename=... state=drain/resume` | `kubectl cordon/uncordon` |

All three write the exit code of `wanka train` to the attempt's exit file from the launch's own shell,
so the exit is known to a restarted service that is no longer the launch's parent.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

BACKENDS = ("local", "slurm", "k8s")
TAG = "WANKA_CONTROL_LAUNCH"  # environment tag JOB:ATTEMPT carried by every process of a launch


class BackendError(Exception):
    """A backend command failed (sbatch refused a job, kubectl is missing): one line, no traceback."""


@dataclass(frozen=True)
class Launched:
    proc_start: float  # when the launch began (local: the leader's create time, the pid-reuse guard)
    pid: int | None = None  # local: the leader's pid (= its pgid)
    pgid: int | None = None
    backend_id: str | None = None  # slurm: the Slurm job id


class Backend(Protocol):
    name: str

    def nodes(self) -> list[tuple[str, int]] | None:
        """The inventory this backend manages as (name, slots); None: just this machine."""

    def launch(self, job: dict, attempt: int, node: str | None, command: list[str]) -> Launched: ...

    def alive(self, job: dict) -> bool:
        """The job's current launch still runs or waits to run."""

    def started_at(self, job: dict) -> float | None:
        """When the current launch began running; None while it waits in the backend's own queue."""

    def exit_code(self, job: dict) -> int | None:
        """The exit code of an ended launch; None when it was killed before one was known."""

    def describe(self, job: dict) -> str:
        """The launch in the backend's words, for the audit log."""

    def adopt(self, job: dict) -> Launched | None:
        """A launch of the job's current attempt that was started but never committed as `running`."""

    def stop(self, job: dict, graceful_s: float = 20.0) -> str:
        """Stop the current launch (bounded); returns what was stopped, for the audit log."""

    def drain(self, node: str, reason: str) -> None: ...

    def undrain(self, node: str) -> None: ...


def control_dir(ckpt: str) -> Path:
    return Path(ckpt) / "control"


def log_path(ckpt: str, attempt: int) -> Path:
    return control_dir(ckpt) / f"attempt-{attempt}.log"


def exit_path(ckpt: str, attempt: int) -> Path:
    return control_dir(ckpt) / f"attempt-{attempt}.exit"


def tag_of(job_id: int, attempt: int) -> str:
    return f"{job_id}:{attempt}"


def ckpt_hash(job: dict) -> str:
    """8 hex digits of the job's checkpoint dir: two services sharing a cluster never adopt each other's launches."""
    return hashlib.sha1(job["ckpt"].encode()).hexdigest()[:8]


def launch_name(job: dict, attempt: int) -> str:
    """The name a cluster backend gives a launch (Slurm job name, JobSet name): `wanka-JOB-ATTEMPT-HASH`."""
    return f"wanka-{job['id']}-{attempt}-{ckpt_hash(job)}"


def run_client(argv: list[str], named: list[str], env: dict | None, timeout_s: float, stdin: str | None = None) -> str:
    """One call of a cluster client (sbatch, kubectl, ...): its stdout, or BackendError with one line that
    names the call (`named`: the client and its first words) and the client's last line, its verdict."""
    try:
        out = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"{shlex.join(named)} failed: {exc}") from None
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1]
        raise BackendError(f"{shlex.join(named)} failed: {last}")
    return out.stdout


class SayOnce:
    """Writes a backend's trouble to stderr as one line, not again while it repeats unchanged."""

    def __init__(self, backend: str):
        self.backend, self.last = backend, None

    def __call__(self, message: str) -> None:
        if message != self.last:
            sys.stderr.write(f"wanka control: {self.backend}: {message}\n")
            sys.stderr.flush()
            self.last = message


def read_exit_file(ckpt: str, attempt: int) -> int | None:
    try:
        return int(exit_path(ckpt, attempt).read_text().strip())
    except (OSError, ValueError):
        return None


def make_backend(name: str, **options) -> Backend:
    """The backend `wanka control up --backend NAME` runs (SpecError for an unknown name)."""
    from wanka.errors import SpecError

    if name == "local":
        from wanka.control.local_backend import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from wanka.control.slurm_backend import SlurmBackend

        return SlurmBackend.connect(**options)
    if name == "k8s":
        from wanka.control.k8s_backend import K8sBackend

        return K8sBackend.connect(**options)
    raise SpecError("backend", " | ".join(BACKENDS), name)


def wait_until(predicate, timeout_s: float, poll_s: float = 0.2):
    """Poll `predicate` until it returns a truthy value or timeout_s passes (then None): a bounded loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value or None
        time.sleep(poll_s)
