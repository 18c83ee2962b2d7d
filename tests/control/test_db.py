"""The state database on SQLite and on a real PostgreSQL: migrations, jobs, tokens, audit."""

import pytest
from sqlalchemy import inspect

from wanka.control.db import check_db_url, migrate, open_db
from wanka.control.spec import parse_job_spec
from wanka.control.store import Store
from wanka.errors import SpecError


def test_migrations_create_the_schema_and_are_idempotent(db_url):
    engine, _ = open_db(db_url)
    assert set(inspect(engine).get_table_names()) >= {"jobs", "nodes", "audit", "tokens", "telemetry", "alembic_version"}
    assert migrate(engine) == "0003_telemetry"  # a second `up` on the same DB upgrades nothing and keeps the data


def test_jobs_tokens_and_audit_survive_a_reopen(db_url, tmp_path):
    store = Store(open_db(db_url)[1])
    token = store.add_token("alice", "user")
    spec = parse_job_spec({"layout": "dp=2", "steps": 4, "ckpt": str(tmp_path / "a")})
    job = store.submit(spec, owner="alice")
    assert job["nproc"] == 2 and job["state"] == "queued" and job["train_args"]["ckpt_every"] == 5
    store.audit(rule="dead_rank", detection="exit 1", decision="restart", action="launch 2", reason="test",
                detected_at=1.0, job_id=job["id"])
    again = Store(open_db(db_url)[1])  # a new engine: what a restarted service sees
    assert again.who(token) == ("alice", "user")
    assert again.who(token + "x") is None
    assert [j["id"] for j in again.jobs(owner="alice")] == [job["id"]]
    assert again.jobs(owner="bob") == []
    assert again.audit_log(job["id"])[0]["decision"] == "restart"


def test_bad_urls_and_specs_name_the_field(tmp_path):
    with pytest.raises(SpecError, match="^db: "):
        check_db_url("mysql://x/y")
    with pytest.raises(SpecError, match="^db: "):
        check_db_url("not a url")
    cases = [({"steps": 0, "ckpt": "/x"}, "steps"), ({"steps": 1, "ckpt": "rel/path"}, "ckpt"),
             ({"steps": 1, "ckpt": "/x", "layout": "dp=2,tp=7"}, "layout.tp"),
             ({"steps": 1, "ckpt": "/x", "model": "no-such-model"}, "model"),
             ({"steps": 1, "ckpt": "/x", "inject": ["kill@step=1,rank=5"], "layout": "dp=2"}, "inject"),
             ({"steps": 1, "ckpt": "/x", "colour": "red"}, "colour")]
    for body, field in cases:
        with pytest.raises(SpecError) as exc:
            parse_job_spec(body)
        assert exc.value.field == field, (body, str(exc.value))


def test_a_token_never_starts_with_a_dash(db_url, monkeypatch):
    """base64url draws '-' as the first character one time in 64; argparse then reads `--token -x..` as an
    option ("expected one argument"). Issued tokens carry a prefix, so the CLI takes every one of them."""
    import secrets

    from wanka.cli import build_parser
    from wanka.control.store import TOKEN_PREFIX

    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: "-" + "A" * 42)
    store = Store(open_db(db_url)[1])
    token = store.add_token("carol", "user")
    assert token.startswith(TOKEN_PREFIX) and store.who(token) == ("carol", "user")
    args = build_parser().parse_args(["control", "cancel", "1", "--url", "http://x", "--token", token])
    assert args.token == token
