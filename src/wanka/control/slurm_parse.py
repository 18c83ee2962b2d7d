"""Parsers for the Slurm clients' machine-readable output (Slurm 22.05 man pages): `sbatch
--parsable`, `squeue -o '%i|%T|%S'`, `sacct --parsable2`, `sinfo -N -o '%N|%c|%G'`. Each skips what
it cannot read instead of guessing; a line Slurm adds later (a new field, a job step) changes nothing."""

from __future__ import annotations

import re
from datetime import datetime

from wanka.control.backend import BackendError

# squeue(1) "JOB STATE CODES": states after which the job runs no more. Any other state (PENDING,
# RUNNING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED, ...) counts as alive.
TERMINAL = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                      "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "TIMEOUT"})
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD"})
_JOB_ID = re.compile(r"^\d+$")
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[\w.-]+)?:(\d+)")


def parse_sbatch(text: str) -> str:
    """`sbatch --parsable` prints `ID` or `ID;CLUSTER`."""
    first = text.strip().split(";")[0]
    if not _JOB_ID.match(first):
        raise BackendError(f"sbatch printed no job id: {text.strip()[:200]!r}")
    return first


def _state_word(field: str) -> str:
    return field.strip().split(" ")[0].upper()  # sacct: "CANCELLED by 0"


def _time(field: str) -> float | None:
    """squeue %S: ISO local time, or N/A / Unknown / None before the job starts."""
    try:
        return datetime.fromisoformat(field.strip()).timestamp()
    except ValueError:
        return None


def parse_squeue(text: str) -> dict[str, tuple[str, float | None]]:
    """Job id -> (state, start time as epoch seconds; None while it waits)."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not _JOB_ID.match(parts[0].strip()):
            continue
        state = _state_word(parts[1])
        out[parts[0].strip()] = (state, None if state in WAITING else _time(parts[2]))
    return out


def parse_sacct(text: str) -> dict[str, tuple[str, str, str]]:
    """Job id -> (state, ExitCode `code:signal`, job name) from `--format=JobID,State,ExitCode,JobName`
    (the name last: it is free text). Job steps (`ID.batch`, `ID.0`) are skipped: the allocation's
    line is the job's."""
    out = {}
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) < 4 or not _JOB_ID.match(parts[0].strip()):
            continue
        out[parts[0].strip()] = (_state_word(parts[1]), parts[2].strip(), parts[3].strip())
    return out


def exit_code_of(field: str) -> int | None:
    """sacct ExitCode `code:signal`: the code, or 128 + signal when a signal ended it (the shell's convention)."""
    try:
        code, signal = (int(x) for x in field.split(":"))
    except ValueError:
        return None
    return 128 + signal if signal else code


def parse_sinfo_nodes(text: str) -> list[tuple[str, int, int]]:
    """(node, CPUs, GPUs) from `sinfo -N -o '%N|%c|%G'`, each node once (sinfo -N repeats a node per partition)."""
    out: dict[str, tuple[str, int, int]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0].strip() or not parts[1].strip().isdigit():
            continue
        gpus = sum(int(n) for n in _GPU_GRES.findall(re.sub(r"\([^)]*\)", "", parts[2])))  # drop "(S:0-1)"
        out.setdefault(parts[0].strip(), (parts[0].strip(), int(parts[1]), gpus))
    return list(out.values())
