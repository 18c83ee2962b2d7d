"""The dashboard's page and JSON in-process (no jobs launched): auth, user isolation, the metrics series
(NaN included), node utilisation and the planner's prediction. The page itself: test_dashboard_browser.py."""

import json
import math

import pytest
from fastapi.testclient import TestClient

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.control.api import create_app
from wanka.control.dashboard import predicted_tokens_per_s
from wanka.control.db import open_db
from wanka.control.rules import load_rules
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor
from wanka.layout import Layout
from wanka.plan import estimate
from wanka.workload.spec import load_model


@pytest.fixture
def dash(tmp_path):
    store = Store(open_db(f"sqlite:///{tmp_path / 'state.db'}")[1])
    store.ensure_node("local", 4)
    tokens = {name: store.add_token(name, role) for name, role in (("root", "admin"), ("alice", "user"), ("bob", "user"))}
    client = TestClient(create_app(store, Supervisor(store, load_rules())))
    return client, {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()}, store


def submit(client, auth, ckpt):
    r = client.post("/v1/jobs", json={"layout": "dp=2", "steps": 3, "ckpt": str(ckpt)}, headers=auth)
    assert r.status_code == 201, r.text
    return r.json()


def test_page_and_assets_are_served_without_data(dash):
    client, auth, store = dash
    for path in ("/", "/dashboard"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert 'src="/dashboard/dashboard.js"' in r.text and "http" not in r.text.replace("http-equiv", "")  # no CDN
    assert "sessionStorage" in client.get("/dashboard/dashboard.js").text
    assert client.get("/dashboard/dashboard.css").headers["content-type"].startswith("text/css")
    r = client.get("/dashboard/secret.txt")
    assert r.status_code == 422 and r.json()["field"] == "name"


def test_overview_shows_a_user_only_their_jobs_and_audit_but_counts_every_rank(dash, tmp_path):
    client, auth, store = dash
    assert client.get("/v1/dashboard").status_code == 401
    a = submit(client, auth["alice"], tmp_path / "a")
    b = submit(client, auth["bob"], tmp_path / "b")
    store.update_job(b["id"], state="running", node="local")
    for job in (a, b):
        store.audit(rule="hang", detection=f"job {job['id']} quiet", decision="restart", action="relaunched",
                    reason="test", detected_at=1.0, job_id=job["id"], node="local")
    mine = client.get("/v1/dashboard", headers=auth["alice"]).json()
    assert (mine["user"], mine["role"]) == ("alice", "user")
    assert [j["id"] for j in mine["jobs"]] == [a["id"]]
    assert [r["job_id"] for r in mine["audit"]] == [a["id"]]
    [node] = mine["nodes"]
    assert (node["used_slots"], node["utilisation"]) == (2, 0.5)  # bob's running ranks, not his job
    every = client.get("/v1/dashboard", headers=auth["root"]).json()
    assert len(every["jobs"]) == 2 and len(every["audit"]) == 2


def test_metrics_series_reads_the_trainers_file(dash, tmp_path):
    client, auth, store = dash
    job = submit(client, auth["alice"], tmp_path / "a")
    (tmp_path / "a").mkdir()
    lines = [json.dumps({"step": 1, "loss": 9.5, "tokens_per_s": 100.0, "grad_norm": 1.0}),
             json.dumps({"step": 2, "loss": math.nan, "tokens_per_s": 110.0}),  # json.dumps writes NaN
             json.dumps({"step": 3, "loss": 9.1, "tokens_per_s": 120.0}), '{"step": 4, "lo']  # a line being written
    (tmp_path / "a" / "metrics.jsonl").write_text("\n".join(lines))
    r = client.get(f"/v1/jobs/{job['id']}/metrics", headers=auth["alice"])
    assert r.status_code == 200
    points = r.json()["points"]
    assert [p["step"] for p in points] == [1, 2, 3]
    assert [p["loss"] for p in points] == [9.5, "nan", 9.1] and "grad_norm" not in points[0]
    assert r.json()["predicted"]["tokens_per_s"] is None  # the local node names no accelerator
    assert [p["step"] for p in client.get(f"/v1/jobs/{job['id']}/metrics?limit=2", headers=auth["alice"]).json()["points"]] == [2, 3]
    assert client.get(f"/v1/jobs/{job['id']}/metrics?limit=0", headers=auth["alice"]).json()["field"] == "limit"
    assert client.get(f"/v1/jobs/{job['id']}/metrics", headers=auth["bob"]).status_code == 404


def test_prediction_comes_from_the_job_record_or_the_planner():
    job = {"model": "tiny", "layout": "dp=2", "nproc": 2, "train_args": {"seq_len": 64}}
    assert predicted_tokens_per_s({**job, "predicted_tokens_per_s": 1234.0}, None)["tokens_per_s"] == 1234.0
    cpu = predicted_tokens_per_s(job, {"name": "local", "slots": 4})
    assert cpu["tokens_per_s"] is None and "local" in cpu["source"]
    on_gpu = predicted_tokens_per_s(job, {"name": "n1", "slots": 8, "gpu": "h100-sxm"})
    cluster = Cluster(parse_cluster_spec({"name": "c", "gpu": "h100-sxm", "gpus": 2, "gpus_per_node": 2,
                                          "scale_up": {"domain": 2}}))
    expected = estimate(load_model("tiny", seq_len=64), cluster, Layout.parse("dp=2"), seq_len=64).tokens_per_s
    assert on_gpu["tokens_per_s"] == pytest.approx(expected) and on_gpu["tokens_per_s"] > 0
    bad = predicted_tokens_per_s(job, {"name": "n1", "slots": 8, "gpu": "no-such-gpu"})
    assert bad["tokens_per_s"] is None and bad["source"].startswith("no prediction")
