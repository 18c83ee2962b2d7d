"""The `slurm` backend: each launch is one Slurm batch job running the `wanka train` command the
`local` backend runs (torchrun --standalone inside the allocation, one node per job).

    wanka control up --backend slurm [--partition P]     # Slurm's clients find the cluster as usual ($SLURM_CONF)

Mapping (Slurm 22.05 man pages sbatch(1), squeue(1), sacct(1), scancel(1), scontrol(1)):
- launch: `sbatch --parsable CKPT/control/attempt-N.sbatch`; the script asks for `--nodes=1
  --ntasks-per-node=1` on the node wanka's scheduler chose (`--nodelist`), `--gres=gpu:N` on a GPU
  node else `--cpus-per-task=N`, `--no-requeue` (wanka decides restarts, so Slurm must not run an
  attempt twice), `--output` appended to the attempt log, and the job name `wanka-JOB-ATTEMPT-HASH`
  (HASH: of the checkpoint dir, so two control services on one cluster never adopt each other's jobs).
  The script writes the exit code of `wanka train` to the attempt's exit file, as the local leader does.
- alive / started: `squeue --states=all -j ID -o %i|%T|%S`; a job purged from squeue (MinJobAge)
  is looked up with `sacct --parsable2`. Any state that is not terminal counts as alive, so a state
  this code does not know never restarts a job twice.
- exit code: the exit file, else sacct's ExitCode (`code:signal`; a signal reads as 128 + signal,
  the shell's convention).
- sacct needs accounting: slurmdbd, or (no database) `JobCompType=jobcomp/filetxt`, read with
  `sacct --completion`; the backend tries the first and falls back to the second. Without either,
  state comes from squeue and the exit code from the exit file only.
- stop: `scancel ID` (Slurm sends SIGTERM, then SIGKILL after KillWait), or `scancel --full
  --signal=KILL ID` for a hang; then waits, bounded, for a terminal state.
- adopt after a restart of the service: by the Slurm job id stored in `jobs.backend_id`, and for an
  attempt committed as `launching` but never as `running`, by its job name (`squeue --name`).
- drain / undrain: `scontrol update nodename=N state=drain reason=...` / `state=resume`.
A failing Slurm command raises `BackendError` (one line); where the supervisor only asks (alive,
started), it is written once to stderr and the job is taken as still alive: an unreachable
controller is not a dead rank.
"""

from __future__ import annotations

import shlex
import shutil
import time

from wanka.control.backend import (TAG, BackendError, Launched, SayOnce, control_dir, exit_path, launch_name, log_path,
                                   read_exit_file, run_client, tag_of, wait_until)
from wanka.control.slurm_parse import (TERMINAL, exit_code_of, parse_sacct, parse_sbatch, parse_sinfo_nodes,
                                       parse_squeue)

CLIENTS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo")
TIMEOUT_S = 60  # one Slurm client call; slurmctld answers in milliseconds when healthy


def batch_script(job: dict, attempt: int, node: str | None, command: list[str], gpus: bool,
                 partition: str | None) -> str:
    """The sbatch script of one launch (written to CKPT/control/attempt-N.sbatch)."""
    ckpt = job["ckpt"]
    exit_file = exit_path(ckpt, attempt)
    lines = ["#!/bin/sh", f"#SBATCH --job-name={launch_name(job, attempt)}", "#SBATCH --nodes=1",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --gres=gpu:{job['nproc']}" if gpus
             else f"#SBATCH --cpus-per-task={job['nproc']}", f"#SBATCH --output={log_path(ckpt, attempt)}",
             "#SBATCH --open-mode=append", "#SBATCH --no-requeue"]
    if node:
        lines.append(f"#SBATCH --nodelist={node}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines += ["", f"export {TAG}={tag_of(job['id'], attempt)}", "export PYTHONWARNINGS=ignore",
              'export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"', shlex.join(command), "rc=$?",
              f"echo $rc >{shlex.quote(str(exit_file))}.tmp && mv {shlex.quote(str(exit_file))}.tmp "
              f"{shlex.quote(str(exit_file))}", "exit $rc", ""]
    return "\n".join(lines)


class SlurmBackend:
    name = "slurm"

    def __init__(self, partition: str | None = None, env: dict | None = None):
        self.partition, self.env = partition, env
        self.gpu_nodes: set[str] = set()
        self._sacct_mode: list[str] | None = ["sacct"]  # becomes ["sacct", "--completion"] or None (see docstring)
        self._say_once = SayOnce("slurm")

    @classmethod
    def connect(cls, partition: str | None = None, env: dict | None = None) -> "SlurmBackend":
        """A backend whose clients are installed and whose controller answers (SpecError otherwise)."""
        from wanka.errors import SpecError

        if missing := [c for c in CLIENTS if shutil.which(c, path=(env or {}).get("PATH")) is None]:
            raise SpecError("backend", f"slurm: Slurm's clients on PATH (missing {', '.join(missing)}; "
                            "apt-get install slurm-client)")
        backend = cls(partition, env)
        try:
            if not backend.nodes():
                raise SpecError("partition", "a Slurm partition with nodes", partition or "(default)")
        except BackendError as exc:
            raise SpecError("backend", f"slurm: a reachable slurmctld ({exc})") from None
        return backend

    # ---- Slurm calls -------------------------------------------------------------------------
    def _run(self, *args: str) -> str:
        return run_client(list(args), list(args[:3]), self.env, TIMEOUT_S)

    def _unanswered(self, exc: BackendError) -> None:
        self._say_once(f"{exc}; running jobs are taken as still running until Slurm answers")

    def _squeue(self, *select: str) -> dict[str, tuple[str, float | None]]:
        return parse_squeue(self._run("squeue", "--noheader", "--states=all", *select, "-o", "%i|%T|%S"))

    def _sacct(self, *select: str) -> dict[str, tuple[str, str, str]]:
        """Job id -> (state, ExitCode, name) from accounting or the job-completion log; {} without either.
        Callers pick their job from the answer: `sacct --completion` ignores --name (seen on Slurm 22.05)."""
        while self._sacct_mode is not None:
            try:
                return parse_sacct(self._run(*self._sacct_mode, "--parsable2", "--noheader",
                                             "--format=JobID,State,ExitCode,JobName", *select))
            except BackendError as exc:
                if self._sacct_mode == ["sacct"] and "accounting storage is disabled" in str(exc).lower():
                    self._sacct_mode = ["sacct", "--completion"]
                elif self._sacct_mode == ["sacct", "--completion"]:
                    self._sacct_mode = None
                    self._say_once(f"sacct unavailable ({exc}); state from squeue, exit codes from exit files")
                else:
                    raise
        return {}

    def _state(self, job: dict) -> tuple[str, float | None] | None:
        """(Slurm state, start time) of the job's current launch; None when Slurm has no record of it."""
        slurm_id = job["backend_id"]
        if slurm_id is None:
            return None
        try:
            found = self._squeue("-j", slurm_id).get(slurm_id)
        except BackendError as exc:
            if "invalid job id" not in str(exc).lower():
                raise
            found = None  # purged from slurmctld's memory (MinJobAge): ask accounting
        if found is None:
            acct = self._sacct("-j", slurm_id).get(slurm_id)
            found = (acct[0], None) if acct else None
        return found

    # ---- the Backend interface ---------------------------------------------------------------
    def nodes(self) -> list[tuple[str, int]]:
        select = ["-p", self.partition] if self.partition else []
        rows = parse_sinfo_nodes(self._run("sinfo", "-N", "--noheader", *select, "-o", "%N|%c|%G"))
        self.gpu_nodes = {name for name, _, gpus in rows if gpus}
        return [(name, gpus or cpus) for name, cpus, gpus in rows]

    def launch(self, job: dict, attempt: int, node: str | None, command: list[str]) -> Launched:
        control_dir(job["ckpt"]).mkdir(parents=True, exist_ok=True)
        exit_path(job["ckpt"], attempt).unlink(missing_ok=True)
        script = control_dir(job["ckpt"]) / f"attempt-{attempt}.sbatch"
        script.write_text(batch_script(job, attempt, node, command, node in self.gpu_nodes, self.partition))
        slurm_id = parse_sbatch(self._run("sbatch", "--parsable", str(script)))
        return Launched(proc_start=time.time(), backend_id=slurm_id)

    def alive(self, job: dict) -> bool:
        try:
            state = self._state(job)
        except BackendError as exc:
            self._unanswered(exc)
            return True
        return state is not None and state[0] not in TERMINAL

    def started_at(self, job: dict) -> float | None:
        try:
            state = self._state(job)
        except BackendError as exc:
            self._unanswered(exc)
            return job["proc_start"]
        return state[1] if state else job["proc_start"]

    def exit_code(self, job: dict) -> int | None:
        code = read_exit_file(job["ckpt"], job["attempt"])
        if code is not None or job["backend_id"] is None:
            return code
        try:
            acct = self._sacct("-j", job["backend_id"]).get(job["backend_id"])
        except BackendError as exc:
            self._say_once(str(exc))
            return None
        return exit_code_of(acct[1]) if acct and acct[0] in ("COMPLETED", "FAILED") else None

    def describe(self, job: dict) -> str:
        try:
            state = self._state(job)
        except BackendError:
            state = None
        return f"Slurm job {job['backend_id']}" + (f" ({state[0]})" if state else "")

    def adopt(self, job: dict) -> Launched | None:
        """An attempt sbatch accepted but the DB never recorded: find it by its job name."""
        name = launch_name(job, job["attempt"])
        found = self._squeue(f"--name={name}")
        if not found:
            found = {i: (s, None) for i, (s, _, n) in self._sacct(f"--name={name}").items() if n == name}
        if not found:
            return None
        slurm_id = min(found, key=int)
        return Launched(proc_start=found[slurm_id][1] or time.time(), backend_id=slurm_id)

    def stop(self, job: dict, graceful_s: float = 20.0) -> str:
        launched = Launched(0.0, backend_id=job["backend_id"]) if job["backend_id"] else self.adopt(job)
        if launched is None:
            return "no Slurm job"
        slurm_id = launched.backend_id
        probe = {**job, "backend_id": slurm_id}
        try:
            if graceful_s > 0:
                self._run("scancel", slurm_id)
            else:
                self._run("scancel", "--full", "--signal=KILL", slurm_id)
        except BackendError:
            if (state := self._state(probe)) is not None and state[0] not in TERMINAL:
                raise  # it still runs: the supervisor tries again on its next pass
            return f"Slurm job {slurm_id} (had already ended)"
        ended = wait_until(lambda: (s := self._state(probe)) is None or s[0] in TERMINAL, graceful_s + 60, poll_s=0.5)
        return f"Slurm job {slurm_id}" + ("" if ended else " (still ending)")

    def drain(self, node: str, reason: str) -> None:
        self._run("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")

    def undrain(self, node: str) -> None:
        self._run("scontrol", "update", f"nodename={node}", "state=resume")
