"""Job traces: the Philly CSV, any CSV in the same shape, validated row by row (docs/sched.md "Traces").

Columns (header row required): `timestamp` (YYYY-MM-DD HH:MM:SS) or `submit_s` (seconds), `duration`
or `duration_s` (seconds at the requested GPUs), `num_gpus` or `gpus`; optional `cluster` or `tenant`,
`priority`, `min_gpus`, `max_gpus`, `topology`, `checkpoint_interval_s`, `preemptible`. `philly` names
the processed Philly job list (Jeon et al., ATC'19, as shipped with Pollux, OSDI'21: 82,247 jobs).

A bad row raises SpecError naming its line and field; with `skip_bad_rows` it is left out and counted
with its reason in `Trace.skipped`. Jobs larger than the cluster are never dropped silently: they are
an error, or skipped with reason "larger than the cluster" when skipping is asked for.
"""

from __future__ import annotations

import csv
import gzip
import zlib
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from wanka.errors import SpecError
from wanka.sched.job import Job

# the Philly trace shipped in the package (traces/README.md has its source and licence), or WANKA_PHILLY_CSV
PHILLY = Path(os.environ.get("WANKA_PHILLY_CSV") or Path(__file__).parent / "traces" / "philly.csv.gz")
ALIASES = {"submit": ("submit_s", "timestamp"), "duration": ("duration_s", "duration"),
           "gpus": ("gpus", "num_gpus"), "tenant": ("tenant", "cluster")}


@dataclass
class Trace:
    name: str
    jobs: list[Job]
    skipped: Counter = field(default_factory=Counter)  # reason -> rows

    @property
    def skipped_rows(self) -> int:
        return sum(self.skipped.values())


def trace_path(name: str) -> Path:
    if name == "philly":
        if not PHILLY.is_file():
            raise SpecError("--trace", f"the Philly trace at {PHILLY} (not found on this machine)", name)
        return PHILLY
    path = Path(name)
    if not path.is_file():
        raise SpecError("--trace", "philly or an existing CSV file", name)
    return path


def load_trace(name: str, *, cluster_gpus: int | None = None, skip_bad_rows: bool = False,
               limit: int | None = None, scale: float = 1.0) -> Trace:
    """Read a trace, sort by submit time, start the clock at 0, compress arrivals by `scale`."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise SpecError("--scale", "a number > 0 (arrival-rate multiplier)", scale)
    path = trace_path(name)
    jobs, skipped = [], Counter()
    try:
        with _open_text(path) as fh:
            reader = csv.DictReader(fh)
            cols = _columns(reader.fieldnames or [], path)
            for line, row in enumerate(reader, start=2):
                job = _row_job(row, cols, line, path.name, cluster_gpus, skip_bad_rows, skipped)
                if job is not None:
                    jobs.append(job)
    except UnicodeDecodeError as exc:
        raise SpecError(path.name, "a UTF-8 CSV text file", f"an undecodable byte at offset {exc.start}") from None
    except csv.Error as exc:
        raise SpecError(path.name, "a well-formed CSV file", str(exc)) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise SpecError(path.name, "a whole gzip-compressed CSV file", f"a damaged gzip stream ({exc})") from None
    if not jobs:  # an empty trace would "replay" to a table of nulls with exit 0
        why = f"every one of its {sum(skipped.values())} rows was skipped" if skipped else "no job rows"
        raise SpecError(path.name, "at least one job row after the header", why)
    jobs.sort(key=lambda j: j.submit_s)  # stable: ties keep file order
    if limit is not None:
        jobs = jobs[:limit]
    t0 = jobs[0].submit_s if jobs else 0.0
    jobs = [_shift(j, t0, scale) for j in jobs]
    return Trace(path.stem if name != "philly" else "philly", jobs, skipped)


def _open_text(path: Path):
    """A CSV file, plain or gzip-compressed (by its first two bytes, not its name)."""
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return path.open(newline="", encoding="utf-8")


def _row_job(row, cols, line, fname, cluster_gpus, skip_bad_rows, skipped) -> Job | None:
    """The row's job; None when it is bad and skipping was asked for (counted in `skipped`)."""
    try:
        job = _job(row, cols, line, fname)
        if cluster_gpus is not None and job.min_gpus_ > cluster_gpus:
            raise SpecError(f"{fname} line {line}: num_gpus",
                            f"at most the cluster's {cluster_gpus} GPUs (larger than the cluster)", job.gpus)
    except SpecError as exc:
        if not skip_bad_rows:
            raise
        skipped[_reason(exc)] += 1
        return None
    return job


def _columns(header: list[str], path: Path) -> dict[str, str | None]:
    have = set(header)
    out: dict[str, str | None] = {}
    for field_, names in ALIASES.items():
        found = next((n for n in names if n in have), None)
        if found is None and field_ != "tenant":
            raise SpecError(f"{path.name} header", f"a column named {' or '.join(names)}", ",".join(header))
        out[field_] = found
    for opt in ("priority", "min_gpus", "max_gpus", "topology", "checkpoint_interval_s", "preemptible"):
        out[opt] = opt if opt in have else None
    return out


def _num(row: dict, col: str, line: int, fname: str, kind=float, lo: float = 0.0):
    raw = row.get(col)
    where = f"{fname} line {line}: {col}"
    if raw is None or raw.strip() == "":
        raise SpecError(where, "a value (missing)")
    try:
        value = kind(float(raw)) if kind is int else float(raw)
    except ValueError:
        raise SpecError(where, "a number", raw) from None
    if kind is int and float(raw) != int(float(raw)):
        raise SpecError(where, "a whole number", raw)
    if not math.isfinite(value) or value < lo:
        raise SpecError(where, f"a finite number >= {lo:g}", raw)
    return value


def _job(row: dict, cols: dict, line: int, fname: str) -> Job:
    sub = cols["submit"]
    if sub == "timestamp":
        raw = row.get(sub) or ""
        try:
            submit = datetime.strptime(raw.strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            raise SpecError(f"{fname} line {line}: timestamp", "YYYY-MM-DD HH:MM:SS", raw) from None
    else:
        submit = _num(row, sub, line, fname, lo=-math.inf)
    duration = _num(row, cols["duration"], line, fname)
    gpus = _num(row, cols["gpus"], line, fname, kind=int, lo=1)
    kw = {}
    if cols["tenant"] and (row.get(cols["tenant"]) or "").strip():
        kw["tenant"] = row[cols["tenant"]].strip()
    if cols["priority"] and (row.get("priority") or "").strip():
        kw["priority"] = _num(row, "priority", line, fname, kind=int, lo=-math.inf)
    for opt in ("min_gpus", "max_gpus"):
        if cols[opt] and (row.get(opt) or "").strip():
            kw[opt] = _num(row, opt, line, fname, kind=int, lo=1)
    if cols["checkpoint_interval_s"] and (row.get("checkpoint_interval_s") or "").strip():
        kw["checkpoint_interval_s"] = _num(row, "checkpoint_interval_s", line, fname)
    if cols["topology"] and (row.get("topology") or "").strip():
        kw["topology"] = row["topology"].strip()
    if cols["preemptible"] and (row.get("preemptible") or "").strip():
        flag = row["preemptible"].strip().lower()
        if flag not in ("true", "false", "1", "0"):
            raise SpecError(f"{fname} line {line}: preemptible", "true or false", flag)
        kw["preemptible"] = flag in ("true", "1")
    try:
        return Job(id=f"{fname}:{line}", gpus=gpus, submit_s=submit, duration_s=duration, **kw)
    except SpecError as exc:  # name the line, keep Job's field name
        field_ = exc.field.rsplit(".", 1)[-1]
        raise SpecError(f"{fname} line {line}: {field_}", exc.expected, exc.got) from None


def _reason(exc: SpecError) -> str:
    field_ = exc.field.split(": ", 1)[-1]
    if "larger than the cluster" in exc.expected:
        return "num_gpus larger than the cluster"
    return f"bad {field_}: expected {exc.expected}"


def _shift(job: Job, t0: float, scale: float) -> Job:
    from dataclasses import replace
    return replace(job, submit_s=(job.submit_s - t0) / scale)
