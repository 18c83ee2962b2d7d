"""The control plane's state: SQLAlchemy 2.x tables, engine, and Alembic migrations run at start-up.

SQLite (a file, the embedded default) and PostgreSQL (by URL) hold the same schema; the schema is
created only by the migrations in `migrations/versions/` (Alembic), never by `create_all`, so a
database written by an older wanka is upgraded in place.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from wanka.errors import SpecError

JOB_STATES = ("queued", "launching", "running", "succeeded", "failed", "cancelled")
ACTIVE_STATES = ("queued", "launching", "running")
ROLES = ("admin", "user")


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str] = mapped_column(String(200))
    layout: Mapped[str] = mapped_column(String(200))
    nproc: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(Integer)
    ckpt: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    train_args: Mapped[dict] = mapped_column(JSON, default=dict)  # further `wanka train` flags (seq_len, inject, ...)
    state: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    node: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # launches so far (1 = first launch)
    restarts: Mapped[int] = mapped_column(Integer, default=0)  # launches made by a recovery action
    lr_scale: Mapped[float] = mapped_column(Float, default=1.0)  # the control plane's LR cut (loss_spike rule)
    spikes_seen: Mapped[int] = mapped_column(Integer, default=0)  # the trainer's loss_spike events audited so far
    predicted_tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # wanka.plan at submit
    straggler_alerted_attempt: Mapped[int] = mapped_column(Integer, default=0)  # the straggler rule fired in this launch
    throughput_alerted_attempt: Mapped[int] = mapped_column(Integer, default=0)  # the throughput rule fired in this launch
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pgid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    proc_start: Mapped[float | None] = mapped_column(Float, nullable=True)  # the pid's create time (pid reuse guard)
    backend: Mapped[str | None] = mapped_column(String(16), nullable=True)  # the backend that launched it (local | slurm | k8s)
    backend_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the backend's id of the launch (Slurm job id)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    result: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    def to_dict(self) -> dict:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    slots: Mapped[int] = mapped_column(Integer)  # ranks this node runs at once (GPUs; CPU processes here)
    state: Mapped[str] = mapped_column(String(16), default="up")  # up | drained
    risk: Mapped[float | None] = mapped_column(Float, nullable=True)  # as reported (POST /v1/nodes/NAME/risk)
    predicted_risk: Mapped[float | None] = mapped_column(Float, nullable=True)  # the telemetry predictor's (risk.py)
    risk_detail: Mapped[str | None] = mapped_column(Text, nullable=True)  # the features behind predicted_risk
    health_since: Mapped[float | None] = mapped_column(Float, nullable=True)  # telemetry before this is history (undrain)
    updated_at: Mapped[float] = mapped_column(Float, default=time.time)

    def to_dict(self) -> dict:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class AuditRow(Base):
    """One detect -> decide -> act record."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), nullable=True, index=True)
    node: Mapped[str | None] = mapped_column(String(64), nullable=True)
    rule: Mapped[str] = mapped_column(String(64))
    detection: Mapped[str] = mapped_column(Text)
    decision: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    detected_at: Mapped[float] = mapped_column(Float)
    acted_at: Mapped[float] = mapped_column(Float)

    def to_dict(self) -> dict:
        return {c.name: getattr(self, c.name) for c in self.__table__.columns}


class TelemetryRow(Base):
    """One sample of one node metric (agent.py names the metrics); kept for the service's retention."""

    __tablename__ = "telemetry"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(64))
    ts: Mapped[float] = mapped_column(Float)  # seconds since the epoch, as sampled
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    __tablename__ = "tokens"
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)  # only the hash is stored
    user: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


def default_db_url(state_dir: Path) -> str:
    return f"sqlite:///{(state_dir / 'state.db').resolve()}"


def check_db_url(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SpecError("db", "a database URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB", url) from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise SpecError("db", "a sqlite:// or postgresql:// URL", url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    return url


def make_engine(url: str) -> Engine:
    url = check_db_url(url)
    if url.startswith("sqlite"):
        # several threads (API workers, the supervisor) share the file; WAL lets readers run beside the writer
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def migrate(engine: Engine) -> str:
    """Bring the schema to the newest revision (Alembic `upgrade head`); returns that revision."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def open_db(url: str) -> tuple[Engine, sessionmaker]:
    engine = make_engine(url)
    migrate(engine)
    return engine, sessionmaker(engine, expire_on_commit=False)
