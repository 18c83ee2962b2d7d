"""Fixtures for the control plane: a real PostgreSQL server (session), a fresh DB per test on SQLite
and on PostgreSQL, prepared corpus shards, and `wanka control up` as a real subprocess."""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from wanka.data.corpus import write_corpus
from wanka.data.pipeline import prepare


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """initdb + pg_ctl in a temp dir, listening only on a unix socket there (as `postgres` when root)."""

    def __init__(self):
        self.bin = _pg_bin()
        if self.bin is None:
            raise RuntimeError("no initdb found (apt-get install postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="wanka-pg-"))
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.root / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        opts = f"-k {self.root} -p {self.port} -c listen_addresses='' -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.root / "data"), "-o", opts, "-w", "-t", "120", "-l", str(self.root / "log"), "start")
        self._names = itertools.count()

    def _run(self, tool: str, *args: str) -> None:
        out = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise RuntimeError(f"{tool} failed: {out.stderr.strip()} {log[-500:]}")

    def url(self, db: str) -> str:
        return f"postgresql+psycopg://postgres@/{db}?host={self.root}&port={self.port}"

    def new_database(self) -> str:
        import psycopg

        name = f"wanka_{next(self._names)}"
        with psycopg.connect(host=str(self.root), port=self.port, user="postgres", dbname="postgres", autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    """A running PostgreSQL server. In CI (CI set) a server that cannot start fails the tests; on a
    developer machine without PostgreSQL installed they are skipped with the reason."""
    try:
        server = PostgresServer()
    except (RuntimeError, KeyError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL could not start in CI: {exc}")
        pytest.skip(f"PostgreSQL not available here ({exc}); CI installs it in .ci/run")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def slurm():
    """A running single-host Slurm (tests/control/slurm_cluster.py). In CI (CI set) a Slurm that cannot
    start fails the tests; elsewhere, without the packages, they are skipped with the reason."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("control_slurm_cluster", Path(__file__).with_name("slurm_cluster.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # tests/ is no package (--import-mode=importlib): load the helper by path
    try:
        cluster = module.SlurmCluster().start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm could not start in CI: {exc}")
        pytest.skip(f"Slurm not available here ({exc}); CI installs slurm-wlm and munge in .ci/run")
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    prepare(write_corpus(root / "text", n_sentences=4000), root / "shards")
    return root / "shards"


@pytest.fixture(scope="session")
def plain_train_sha(corpus_dir, tmp_path_factory):
    """params_sha256 of a run under plain `wanka train`, uninterrupted: what every recovered job must end
    with. Called with (layout, steps, ckpt_every); each distinct run is trained once per session."""
    import json

    done: dict[tuple, str] = {}

    def sha(layout: str, steps: int, every: int) -> str:
        if (layout, steps, every) not in done:
            out = subprocess.run([sys.executable, "-m", "wanka", "train", "--json", "--nproc", "2", "--layout", layout,
                                  "--seq-len", "64", "--steps", str(steps), "--ckpt-every", str(every), "--data",
                                  str(corpus_dir), "--ckpt", str(tmp_path_factory.mktemp("plain"))],
                                 capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, out.stderr
            done[layout, steps, every] = json.loads(out.stdout)["params_sha256"]
        return done[layout, steps, every]

    return sha


class Service:
    """`wanka control up` as a real process; `start()` returns once it says it is serving."""

    def __init__(self, db: str, state_dir: Path, rules: Path | None = None, slots: int = 2, args: tuple = (),
                 env: dict | None = None):
        self.db, self.state_dir, self.rules, self.slots = db, state_dir, rules, slots
        self.args, self.env = args, env or {}  # further `up` flags (--backend slurm) and environment (SLURM_CONF)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout_s: float = 180) -> "Service":
        self.starts += 1
        log = self.state_dir / f"service-{self.starts}.log"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "wanka", "control", "up", "--db", self.db, "--port", str(self.port),
               "--state-dir", str(self.state_dir), "--slots", str(self.slots), "--poll", "0.3"]
        if self.rules:
            cmd += ["--rules", str(self.rules)]
        cmd += list(self.args)
        env = {**os.environ, **self.env, "WANKA_TEST_SERVICE": str(self.state_dir)}  # inherited by every job process
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"), start_new_session=True, env=env)
        deadline = time.monotonic() + timeout_s
        while "serving on" not in log.read_text():  # the service's own line, written before uvicorn binds
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"service did not start: {log.read_text()}"
            time.sleep(0.2)
        import httpx

        while True:  # uvicorn binds right after that line
            try:
                httpx.get(self.url + "/healthz", timeout=5)
                return self
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"service did not answer: {log.read_text()}"
                time.sleep(0.2)

    @property
    def token(self) -> str:
        return (self.state_dir / "admin.token").read_text().strip()

    # ---- the API as a test uses it: admin token, no error status, waits bounded ------------------
    def api(self, method: str, path: str, **kw):
        import httpx

        r = httpx.request(method, self.url + path, headers={"Authorization": f"Bearer {self.token}"}, timeout=60, **kw)
        assert r.status_code < 400, r.text
        return r.json()

    def wait_job(self, job_id: int, states, timeout_s: float = 420) -> dict:
        """Poll the job's state until it is one of `states` (bounded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.api("GET", f"/v1/jobs/{job_id}")
            if job["state"] in states:
                return job
            assert time.monotonic() < deadline, f"job {job_id} stuck in {job['state']}: {job}"
            time.sleep(0.3)

    def wait_audit(self, job_id: int, rule: str, timeout_s: float = 120) -> list[dict]:
        """Poll the job's audit log until it holds a `rule` row (bounded): the row follows the action it records."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = [a for a in self.api("GET", f"/v1/jobs/{job_id}")["audit"] if a["rule"] == rule]
            if rows:
                return rows
            assert time.monotonic() < deadline, f"job {job_id}: no {rule} audit row"
            time.sleep(0.3)

    @staticmethod
    def wait_step(ckpt: Path, step: int, timeout_s: float = 300) -> None:
        """Poll a job's metrics.jsonl until rank 0 has logged `step` (bounded)."""
        import json

        deadline = time.monotonic() + timeout_s
        path = ckpt / "metrics.jsonl"
        while not (path.exists() and any(json.loads(l)["step"] >= step for l in path.read_text().splitlines() if l.strip())):
            assert time.monotonic() < deadline, f"no step {step} in {path}"
            time.sleep(0.3)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture
def service_factory(tmp_path):
    started: list[Service] = []

    def make(db: str, rules: Path | None = None, args: tuple = (), env: dict | None = None) -> Service:
        s = Service(db, tmp_path / f"state{len(started)}", rules, args=args, env=env)
        started.append(s)
        return s

    yield make
    import psutil

    for s in started:
        s.stop()
        mine = []
        for p in psutil.process_iter(["pid"]):  # the jobs' processes outlive the service by design
            try:
                if p.environ().get("WANKA_TEST_SERVICE") == str(s.state_dir):
                    mine.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        for p in mine:
            p.kill()
        psutil.wait_procs(mine, timeout=30)
