"""A real single-host Slurm for the tests: munged, slurmctld and slurmd from the distribution's
packages (Debian 12: slurm-wlm 22.05, munge), run as root in a temp dir, on free ports.

Clients (sbatch, squeue, sacct, scancel, scontrol, sinfo) find the cluster through $SLURM_CONF,
which `env` carries; the munge socket is named in slurm.conf (AuthInfo=socket=...). Nothing is
written outside the temp dir.

Configuration choices (slurm.conf(5), Slurm 22.05):
- ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroup hierarchy is needed (a
  container has none to delegate);
- SelectType=select/cons_tres with CR_Core: CPUs are allocated, so two jobs of 2 ranks on a
  2-CPU node queue one behind the other;
- AccountingStorageType=accounting_storage/none: there is no slurmdbd, so `sacct` has no job
  records (it says so); the control plane then reads the state from squeue/scontrol and the exit
  code from the attempt's exit file (docs/control.md "Backends").
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_packages() -> list[str]:
    return [d for d in DAEMONS + ("sbatch", "sinfo") if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]


def _bin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """One node named NODE with `cpus` CPUs in partition `wanka`; `start()` returns once sinfo says idle."""

    NODE = "wanka-node"

    def __init__(self, cpus: int = 2, memory_mb: int = 1024):
        if os.geteuid() != 0:
            raise RuntimeError("the Slurm fixture runs its daemons as root")
        if missing := missing_packages():
            raise RuntimeError(f"missing {', '.join(missing)} (apt-get install slurm-wlm munge)")
        self.root = Path(tempfile.mkdtemp(prefix="wanka-slurm-"))
        self.cpus, self.memory_mb = cpus, memory_mb
        self.conf = self.root / "slurm.conf"
        self.munge_socket = self.root / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def _write_conf(self) -> None:
        r = self.root
        (r / "state").mkdir()
        (r / "spool").mkdir()
        self.conf.write_text("\n".join([
            "ClusterName=wanka-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={r / 'jobcomp.txt'}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/builtin",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "MinJobAge=600",
            f"NodeName={self.NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} State=UNKNOWN",
            f"PartitionName=wanka Nodes={self.NODE} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))

    def _daemon(self, *cmd: str) -> None:
        log = open(self.root / f"{Path(cmd[0]).name}.out", "w")
        self.procs.append(subprocess.Popen(list(cmd), env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def start(self, timeout_s: float = 120) -> "SlurmCluster":
        self._write_conf()
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._daemon(_bin("munged"), "-F", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
                     f"--pid-file={self.root / 'munged.pid'}", f"--log-file={self.root / 'munged.log'}",
                     f"--seed-file={self.root / 'munged.seed'}")
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged did not create its socket")
        self._daemon(_bin("slurmctld"), "-D", "-f", str(self.conf))
        self._daemon(_bin("slurmd"), "-D", "-f", str(self.conf), "-N", self.NODE)
        self._wait(lambda: self.node_state() == "idle", timeout_s, "the node did not become idle")
        return self

    def node_state(self) -> str | None:
        out = subprocess.run(["sinfo", "--noheader", "-n", self.NODE, "-o", "%T"], env=self.env, capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip() or None if out.returncode == 0 else None

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"{what} ({'exited: ' + ', '.join(dead) if dead else 'timed out'}): {self.logs()}")
            time.sleep(0.5)

    def logs(self) -> str:
        parts = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out", "slurmctld.log", "slurmd.log"):
            f = self.root / name
            if f.exists() and f.stat().st_size:
                parts.append(f"[{name}] " + f.read_text()[-800:])
        return " ".join(parts)

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--partition=wanka"], env=self.env, capture_output=True, timeout=30)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(30)
        shutil.rmtree(self.root, ignore_errors=True)
