"""Reads and writes of the control plane's tables; every state change commits before it is acted on."""

from __future__ import annotations

import hashlib
import secrets
import time

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from wanka.control.db import ACTIVE_STATES, ROLES, AuditRow, JobRow, NodeRow, TokenRow
from wanka.control.spec import JobSpec
from wanka.errors import SpecError


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOKEN_PREFIX = "wk_"


class Store:
    def __init__(self, sessions: sessionmaker):
        self.sessions = sessions

    # ---- tokens ------------------------------------------------------------------------------
    def add_token(self, user: str, role: str) -> str:
        if role not in ROLES:
            raise SpecError("role", " | ".join(ROLES), role)
        if not user or len(user) > 64 or not user.replace("-", "").replace("_", "").isalnum():
            raise SpecError("user", "a name of letters, digits, '-' and '_' (at most 64)", user)
        # "wk_" first: a base64url token starts with '-' one time in 64, and `--token -x...` is then read by
        # argparse as an option ("expected one argument"); the prefix keeps all 256 random bits
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.sessions.begin() as s:
            s.add(TokenRow(sha256=_hash(token), user=user, role=role, created_at=time.time()))
        return token

    def has_tokens(self) -> bool:
        with self.sessions() as s:
            return s.scalars(select(TokenRow).limit(1)).first() is not None

    def who(self, token: str) -> tuple[str, str] | None:
        with self.sessions() as s:
            row = s.get(TokenRow, _hash(token))
            return (row.user, row.role) if row else None

    # ---- nodes -------------------------------------------------------------------------------
    def ensure_node(self, name: str, slots: int) -> None:
        with self.sessions.begin() as s:
            row = s.get(NodeRow, name)
            if row is None:
                s.add(NodeRow(name=name, slots=slots, state="up", updated_at=time.time()))
            else:
                row.slots = slots

    def nodes(self) -> list[dict]:
        with self.sessions() as s:
            return [r.to_dict() for r in s.scalars(select(NodeRow).order_by(NodeRow.name))]

    def set_node(self, name: str, **fields) -> dict:
        with self.sessions.begin() as s:
            row = s.get(NodeRow, name)
            if row is None:
                raise SpecError("node", "a known node name", name)
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = time.time()
            return row.to_dict()

    # ---- jobs --------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, owner: str, predicted_tokens_per_s: float | None = None) -> dict:
        with self.sessions.begin() as s:
            row = JobRow(owner=owner, model=spec.model, layout=spec.layout, nproc=spec.nproc, steps=spec.steps,
                         ckpt=spec.ckpt, priority=spec.priority, train_args=spec.train_args(), state="queued",
                         attempt=0, restarts=0, lr_scale=1.0, cancel_requested=False, created_at=time.time(),
                         predicted_tokens_per_s=predicted_tokens_per_s)
            s.add(row)
            s.flush()
            return row.to_dict()

    def job(self, job_id: int) -> dict | None:
        with self.sessions() as s:
            row = s.get(JobRow, job_id)
            return row.to_dict() if row else None

    def jobs(self, owner: str | None = None, states: tuple[str, ...] | None = None) -> list[dict]:
        q = select(JobRow).order_by(JobRow.id)
        if owner is not None:
            q = q.where(JobRow.owner == owner)
        if states is not None:
            q = q.where(JobRow.state.in_(states))
        with self.sessions() as s:
            return [r.to_dict() for r in s.scalars(q)]

    def active_jobs(self) -> list[dict]:
        return self.jobs(states=ACTIVE_STATES)

    def update_job(self, job_id: int, **fields) -> dict:
        with self.sessions.begin() as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            for k, v in fields.items():
                setattr(row, k, v)
            return row.to_dict()

    def request_cancel(self, job_id: int) -> dict:
        with self.sessions.begin() as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            if row.state in ACTIVE_STATES:
                row.cancel_requested = True
            return row.to_dict()

    # ---- audit -------------------------------------------------------------------------------
    def audit(self, *, rule: str, detection: str, decision: str, action: str, reason: str, detected_at: float,
              job_id: int | None = None, node: str | None = None) -> dict:
        with self.sessions.begin() as s:
            row = AuditRow(job_id=job_id, node=node, rule=rule, detection=detection, decision=decision, action=action,
                           reason=reason, detected_at=detected_at, acted_at=time.time())
            s.add(row)
            s.flush()
            return row.to_dict()

    def audit_log(self, job_id: int | None = None) -> list[dict]:
        q = select(AuditRow).order_by(AuditRow.id)
        if job_id is not None:
            q = q.where(AuditRow.job_id == job_id)
        with self.sessions() as s:
            return [r.to_dict() for r in s.scalars(q)]
