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

import psutil

from wanka.control.backend import TAG, Launched, control_dir, exit_path, log_path, read_exit_file, tag_of

__all__ = ["TAG", "LocalBackend", "log_path"]

# The launch's leader: log everything to the attempt log, then write the exit code atomically.
EXIT_SCRIPT = ('exec >>"$WANKA_CONTROL_LOG" 2>&1; "$@"; rc=$?; echo $rc >"$WANKA_CONTROL_EXIT.tmp"; '
               'mv "$WANKA_CONTROL_EXIT.tmp" "$WANKA_CONTROL_EXIT"')


class LocalBackend:
    name = "local"

    def __init__(self):
        self._children: dict[int, subprocess.Popen] = {}  # launches this process started (reaped on exit)

    def nodes(self) -> None:
        return None  # this machine: `up` registers it as node `local`

    def launch(self, job: dict, attempt: int, node: str | None, command: list[str]) -> Launched:
        job_id, ckpt = job["id"], job["ckpt"]
        control_dir(ckpt).mkdir(parents=True, exist_ok=True)
        exit_path(ckpt, attempt).unlink(missing_ok=True)
        env = {**os.environ, TAG: tag_of(job_id, attempt), "WANKA_CONTROL_LOG": str(log_path(ckpt, attempt)),
               "WANKA_CONTROL_EXIT": str(exit_path(ckpt, attempt)), "PYTHONWARNINGS": "ignore",
               "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        proc = subprocess.Popen(["/bin/sh", "-c", EXIT_SCRIPT, "wanka-control-launch", *command], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self._children[proc.pid] = proc
        return Launched(proc_start=psutil.Process(proc.pid).create_time(), pid=proc.pid, pgid=proc.pid)

    def alive(self, job: dict) -> bool:
        """The launch's leader still runs (not exited, not a zombie, not a reused pid)."""
        pid, proc_start = job["pid"], job["proc_start"]
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

    def started_at(self, job: dict) -> float | None:
        return job["proc_start"]

    def exit_code(self, job: dict) -> int | None:
        """The exit code the leader wrote; None when it was killed before it could write one."""
        return read_exit_file(job["ckpt"], job["attempt"])

    def describe(self, job: dict) -> str:
        return f"leader pid {job['pid']} (start time {job['proc_start'] or 0:.2f})"

    def adopt(self, job: dict) -> Launched | None:
        """The oldest process tagged with the job's current attempt is its leader."""
        procs = self.find(job["id"], job["attempt"])
        if not procs:
            return None
        leader = min(procs, key=lambda p: p.create_time())
        return Launched(proc_start=leader.create_time(), pid=leader.pid, pgid=leader.pid)

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

    def stop(self, job: dict, graceful_s: float = 20.0) -> str:
        """SIGTERM (graceful_s > 0) then SIGKILL every process of the launch; says how many there were.
        Bounded: each wait is psutil.wait_procs with a timeout."""
        procs = self.find(job["id"], job["attempt"])
        if graceful_s > 0:
            for p in procs:
                _signal(p, signal.SIGTERM)
            _, procs_left = psutil.wait_procs(procs, timeout=graceful_s)
        else:
            procs_left = procs
        for _ in range(5):  # a process forked after the scan (a leader's last command, a worker spawning) is scanned again
            for p in procs_left:
                _signal(p, signal.SIGKILL)
            psutil.wait_procs(procs_left, timeout=30)
            procs_left = [p for p in self.find(job["id"], job["attempt"]) if p.pid not in {q.pid for q in procs}]
            if not procs_left:
                break
            procs += procs_left
        for pid in [pid for pid, c in self._children.items() if c.poll() is not None]:
            del self._children[pid]
        return f"{len(procs)} process(es)"

    def drain(self, node: str, reason: str) -> None:
        pass  # the supervisor's scheduler keeps work off a drained node; nothing else to tell

    def undrain(self, node: str) -> None:
        pass


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except psutil.NoSuchProcess:
        pass
