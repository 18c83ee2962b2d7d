"""The REST API in-process (no jobs launched): bearer tokens, the two roles, 4xx naming the field, /metrics."""

import re

import pytest
import yaml
from fastapi.testclient import TestClient

from wanka.control.api import create_app
from wanka.control.db import open_db
from wanka.control.rules import load_rules, prometheus_rules
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor


@pytest.fixture
def api(db_url):
    store = Store(open_db(db_url)[1])
    store.ensure_node("local", 2)
    tokens = {name: store.add_token(name, role) for name, role in (("root", "admin"), ("alice", "user"), ("bob", "user"))}
    client = TestClient(create_app(store, Supervisor(store, load_rules())))
    return client, {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()}, store


def test_users_see_and_cancel_only_their_own_jobs(api, tmp_path):
    client, auth, store = api
    body = {"layout": "dp=2", "steps": 3, "ckpt": str(tmp_path / "a")}
    r = client.post("/v1/jobs", json=body, headers=auth["alice"])
    assert r.status_code == 201 and r.json()["owner"] == "alice"
    a = r.json()
    b = client.post("/v1/jobs", json={**body, "ckpt": str(tmp_path / "b")}, headers=auth["bob"]).json()
    assert [j["id"] for j in client.get("/v1/jobs", headers=auth["alice"]).json()] == [a["id"]]
    assert len(client.get("/v1/jobs", headers=auth["root"]).json()) == 2
    # bob's job is invisible to alice, and her cancel does not reach it
    assert client.get(f"/v1/jobs/{b['id']}", headers=auth["alice"]).status_code == 404
    assert client.post(f"/v1/jobs/{b['id']}/cancel", headers=auth["alice"]).status_code == 404
    assert client.get(f"/v1/jobs/{b['id']}/logs", headers=auth["alice"]).status_code == 404
    assert store.job(b["id"])["cancel_requested"] is False
    assert client.post(f"/v1/jobs/{b['id']}/cancel", headers=auth["bob"]).json()["cancel_requested"] is True
    assert client.post(f"/v1/jobs/{a['id']}/cancel", headers=auth["root"]).json()["cancel_requested"] is True


def test_auth_and_roles(api):
    client, auth, store = api
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/v1/nodes/local/drain", headers=auth["alice"]).status_code == 403
    assert store.nodes()[0]["state"] == "up"
    assert client.post("/v1/nodes/local/drain", headers=auth["root"]).json()["state"] == "drained"
    assert client.post("/v1/nodes/local/undrain", headers=auth["root"]).json()["state"] == "up"
    assert client.post("/v1/tokens", json={"user": "carol"}, headers=auth["alice"]).status_code == 403
    new = client.post("/v1/tokens", json={"user": "carol"}, headers=auth["root"]).json()["token"]
    assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {new}"}).json() == []


@pytest.mark.parametrize("body, field", [
    ({"layout": "dp=2", "ckpt": "/tmp/x"}, "steps"),                       # missing
    ({"layout": "dp=2", "steps": "many", "ckpt": "/tmp/x"}, "steps"),      # wrong type
    ({"layout": "dp=4", "steps": 2, "ckpt": "/tmp/x"}, "nproc"),           # more ranks than the inventory
    ({"layout": "dp=2,zz=1", "steps": 2, "ckpt": "/tmp/x"}, "layout.zz"),
    ({"layout": "dp=2", "steps": 2, "ckpt": "/tmp/x", "priority": 10**6}, "priority"),
    ({"layout": "dp=2", "steps": 2, "ckpt": "/tmp/x", "extra": 1}, "extra"),
])
def test_bad_requests_are_4xx_naming_the_field(api, body, field):
    client, auth, store = api
    r = client.post("/v1/jobs", json=body, headers=auth["alice"])
    assert r.status_code == 422 and r.json()["field"] == field, r.json()
    assert r.json()["detail"].startswith(field + ": expected")
    assert store.jobs() == []  # nothing half-written
    assert client.post("/v1/nodes/nosuch/drain", headers=auth["root"]).json()["field"] == "node"


def test_metrics_export_what_the_alert_rules_read(api, tmp_path):
    client, auth, store = api
    client.post("/v1/jobs", json={"layout": "dp=2", "steps": 3, "ckpt": str(tmp_path / "a")}, headers=auth["alice"])
    assert client.post("/v1/nodes/local/risk", json={"risk": 1.5}, headers=auth["root"]).json()["field"] == "risk"
    assert client.post("/v1/nodes/local/risk", json={"risk": 0.2}, headers=auth["alice"]).status_code == 403
    assert client.post("/v1/nodes/local/risk", json={"risk": 0.2}, headers=auth["root"]).json()["risk"] == 0.2
    text = client.get("/metrics").text
    assert 'wanka_control_jobs{state="queued"} 1.0' in text
    assert 'wanka_control_node_risk{node="local"} 0.2' in text
    alerts = yaml.safe_load(prometheus_rules(load_rules()))["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} == {"WankaRankDead", "WankaJobHang", "WankaLossSpikes", "WankaNodeRisk",
                                            "WankaJobRestartsExhausted", "WankaStraggler", "WankaThroughputBelowPlan"}
    read = {m for a in alerts for m in re.findall(r"wanka_control_\w+", a["expr"])}
    assert len(read) == 9
    for name in read:  # every metric an alert reads is one the service exports
        assert re.search(rf"^(# TYPE )?{name}[{{ ]", text, re.M), name  # a sample, or its declaration
