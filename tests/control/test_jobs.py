"""Real jobs through a real `wanka control up`: completion, a killed rank, a hung rank, cancel, a
kill -9 of the service itself, a node the telemetry predictor marks as failing, stragglers and
throughput below the planner's prediction. Each ends with the uninterrupted fp32 run's params_sha256; every wait
polls the service's DB state or the trainer's metrics.jsonl, bounded."""

import json
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from wanka.control.db import open_db
from wanka.control.local_backend import TAG
from wanka.control.rules import load_rules
from wanka.control.spec import parse_job_spec
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor
from wanka.control.throughput import predict_tokens_per_s

pytestmark = pytest.mark.slow

LAYOUT = "dp=2,precision=fp32,gbs=4,mbs=2"
STEPS, EVERY = 10, 3
H = 3600.0


@pytest.fixture(scope="session")
def clean_sha(plain_train_sha):
    """params_sha256 of the same run under plain `wanka train`, uninterrupted."""
    return plain_train_sha(LAYOUT, STEPS, EVERY)


def job_body(corpus_dir, ckpt, steps=STEPS, inject=()):
    return {"layout": LAYOUT, "seq_len": 64, "steps": steps, "ckpt_every": EVERY, "data": str(corpus_dir),
            "ckpt": str(ckpt), "inject": list(inject)}


def launch_processes(job_id, attempt):
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(TAG) == f"{job_id}:{attempt}" and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def steps_logged(ckpt):
    return [json.loads(l)["step"] for l in (ckpt / "metrics.jsonl").read_text().splitlines() if l.strip()]


@pytest.mark.timeout(900)
def test_submit_trains_to_completion(service_factory, corpus_dir, clean_sha, tmp_path, run_cli):
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    ckpt = tmp_path / "job"
    common = ("--url", svc.url, "--token", svc.token)
    code, out, err = run_cli("control", "submit", *common, "--layout", LAYOUT, "--seq-len", "64", "--steps", str(STEPS),
                             "--ckpt-every", str(EVERY), "--data", str(corpus_dir), "--ckpt", str(ckpt), "--json")
    assert code == 0, err
    job_id = json.loads(out)["id"]
    job = svc.wait_job(job_id, ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["attempt"] == 1 and job["restarts"] == 0
    assert job["result"]["params_sha256"] == clean_sha
    assert job["node"] == "local" and job["pid"] and job["pgid"] == job["pid"]
    code, out, _ = run_cli("control", "logs", str(job_id), *common, "--json")
    assert clean_sha in json.loads(out)["log"]  # `wanka train --json` printed its result into the launch log
    code, out, err = run_cli("control", "submit", *common, "--layout", "dp=2", "--steps", "0", "--ckpt", str(ckpt))
    assert code == 2 and err.strip().endswith("steps: expected greater than or equal to 1, got 0")


@pytest.mark.timeout(900)
def test_killed_rank_is_restarted_from_the_newest_checkpoint(service_factory, corpus_dir, clean_sha, tmp_path):
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, tmp_path / "job", inject=["kill@step=5,rank=1"]))
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert job["restarts"] == 1 and job["attempt"] == 2
    assert job["result"]["params_sha256"] == clean_sha
    [entry] = job["audit"]
    assert entry["rule"] == "dead_rank" and entry["decision"] == "restart"
    assert "attempt 1 exited with code" in entry["detection"]
    assert entry["action"] == "launched attempt 2 from checkpoint step 3"
    assert entry["detected_at"] <= entry["acted_at"]


@pytest.mark.timeout(900)
def test_hung_rank_is_killed_and_restarted(service_factory, corpus_dir, clean_sha, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("hang: {factor: 20, min_s: 30, startup_grace_s: 600}\n")
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}", rules=rules).start()
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, tmp_path / "job", inject=["hang@step=5,rank=1"]))
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert job["result"]["params_sha256"] == clean_sha
    hangs = [a for a in job["audit"] if a["rule"] == "hang"]
    # on a heavily loaded machine a slow healthy step can also pass min_s; that launch restarts exactly too
    assert hangs and all(h["decision"] == "restart" and "killed" in h["detection"] for h in hangs), hangs
    real = [h for h in hangs if "no step after step 5 " in h["detection"]]
    assert len(real) == 1 and real[0]["action"].endswith("from checkpoint step 3"), hangs
    # every restart is audited (under heavy load a relaunch can also die in start-up and restart as a dead rank)
    assert job["restarts"] == sum(a["decision"] == "restart" for a in job["audit"]) >= len(hangs)
    assert all(launch_processes(job["id"], a) == [] for a in range(1, job["attempt"]))


@pytest.mark.timeout(600)
def test_cancel_stops_every_process_of_the_job(service_factory, corpus_dir, tmp_path, run_cli):
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, tmp_path / "job", steps=100000))
    svc.wait_step(tmp_path / "job", 1)
    assert len(launch_processes(job["id"], 1)) >= 4  # sh, wanka train, torchrun, 2 workers
    code, _, err = run_cli("control", "cancel", str(job["id"]), "--url", svc.url, "--token", svc.token)
    assert code == 0, err
    job = svc.wait_job(job["id"], ("cancelled",))
    assert job["audit"][-1]["decision"] == "cancel"
    assert launch_processes(job["id"], 1) == []


@pytest.mark.timeout(900)
def test_service_killed_mid_run_readopts_and_launches_nothing_twice(service_factory, corpus_dir, clean_sha, db_url,
                                                                      tmp_path):
    svc = service_factory(db_url).start()
    ckpt = tmp_path / "job"
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, ckpt))
    svc.wait_step(ckpt, 2)
    before = svc.wait_job(job["id"], ("running",))
    svc.kill9()
    assert psutil.pid_exists(before["pid"])  # the job runs on without its supervisor
    svc.start()
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert job["attempt"] == 1 and job["restarts"] == 0  # launched once
    assert job["pid"] == before["pid"] and job["proc_start"] == before["proc_start"]
    assert job["result"]["params_sha256"] == clean_sha
    assert [a["decision"] for a in job["audit"]] == ["adopt"]
    assert steps_logged(ckpt) == list(range(1, STEPS + 1))  # every step once: no second trainer
    assert len(svc.api("GET", "/v1/jobs")) == 1


@pytest.mark.timeout(900)
def test_nan_is_rolled_back_and_audited(service_factory, corpus_dir, tmp_path):
    """The trainer rolls a NaN step back itself; under the service the job ends exactly as the same
    run under plain `wanka train`, and the audit names the detection, decision and action."""
    ref = subprocess.run([sys.executable, "-m", "wanka", "train", "--json", "--nproc", "2", "--layout", LAYOUT,
                          "--seq-len", "64", "--steps", str(STEPS), "--ckpt-every", str(EVERY), "--data", str(corpus_dir),
                          "--ckpt", str(tmp_path / "ref"), "--inject", "nan@step=4"], capture_output=True, text=True,
                         timeout=600)
    assert ref.returncode == 0, ref.stderr
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, tmp_path / "job", inject=["nan@step=4"]))
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["attempt"] == 1
    assert job["result"]["params_sha256"] == json.loads(ref.stdout)["params_sha256"]
    [entry] = job["audit"]
    assert entry["rule"] == "loss_spike" and entry["decision"] == "rollback"
    assert entry["detection"] == "non-finite loss at batch 4"
    assert entry["action"].startswith("trainer restored step 3, skips batches [4]")


@pytest.mark.timeout(900)
def test_repeated_spikes_relaunch_with_a_lower_lr(service_factory, corpus_dir, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("loss_spike: {max_rollbacks: 2, lr_factor: 0.5}\n")
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}", rules=rules).start()
    ckpt = tmp_path / "job"
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, ckpt, inject=["nan@step=4", "nan@step=8"]))
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    relaunch = [a for a in job["audit"] if a["decision"] == "restart"]
    assert len(relaunch) == 1 and relaunch[0]["rule"] == "loss_spike"
    assert relaunch[0]["detection"].startswith("2 loss-spike rollbacks in attempt 1")
    assert relaunch[0]["action"].endswith("with lr x0.5")
    assert job["lr_scale"] == 0.5 and job["attempt"] == 2
    assert json.loads((ckpt / "run.json").read_text())["lr"] == 3e-3 * 0.5  # what attempt 2 trained with
    assert sum(a["decision"] == "rollback" for a in job["audit"]) >= 2


@pytest.mark.timeout(900)
def test_risky_node_is_drained_and_its_job_migrated(service_factory, corpus_dir, clean_sha, tmp_path):
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}").start()
    ckpt = tmp_path / "job"
    slow = [f"slow@step={s},rank=0" for s in range(3, STEPS + 1)]  # 0.5 s each: time to act mid-run; no numeric effect
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, ckpt, inject=slow))
    svc.wait_step(ckpt, 2)
    svc.api("POST", "/v1/nodes/local/risk", json={"risk": 0.9})
    moved = svc.wait_job(job["id"], ("queued", "succeeded", "failed"))
    assert moved["state"] == "queued", moved  # stopped mid-run; waits: the only node is drained
    assert svc.api("GET", "/v1/nodes")[0]["state"] == "drained"
    assert launch_processes(job["id"], 1) == []
    [entry] = svc.wait_audit(job["id"], "node_risk")  # the slow steps may also raise a straggler alert
    assert entry["decision"] == "drain_migrate"
    assert entry["detection"] == "node local risk 0.900 > 0.5" and "no other node is up" in entry["action"]
    svc.api("POST", "/v1/nodes/local/undrain")
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["attempt"] == 2 and job["restarts"] == 1
    assert job["result"]["params_sha256"] == clean_sha



def cluster_file(path, peak_tflops: float):
    """A one-node cluster spec whose GPU does `peak_tflops` at every precision (absurd on purpose)."""
    peaks = {k: peak_tflops for k in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")}
    path.write_text(json.dumps({"name": "absurd", "gpus": 2, "gpus_per_node": 2,
                                "gpu": {"name": "absurd", "peak_tflops": peaks, "hbm_GB": 1000, "hbm_TBps": 1000,
                                        "tdp_W": 100},
                                "scale_up": {"domain": 2, "bandwidth_GBps": 100000}}))
    return path


def failing_gpu_samples(now):
    """Six hours of a GPU warming 60 -> 74 C with ECC and XID counts growing (telemetry.py's precursors)."""
    out = []
    for k in range(43):
        age_h = 7.0 - k / 6
        out.append({"ts": now - age_h * H, "metrics": {
            "gpu0_temp_C": 74.0 - 14.0 * min(age_h, 6.0) / 6.0, "gpu0_power_W": 600.0,
            "gpu0_ecc_corrected_total": 10.0 * (7.0 - age_h), "gpu0_xid_total": float(int(0.5 * (7.0 - age_h)))}})
    return out


@pytest.mark.timeout(900)
def test_node_failing_by_telemetry_is_drained_and_its_job_migrated(service_factory, corpus_dir, clean_sha, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("node_risk: {threshold: 0.5, score_every_s: 0.5}\n")
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}", rules=rules).start()
    ckpt = tmp_path / "job"
    slow = [f"slow@step={s},rank=0" for s in range(3, STEPS + 1)]  # 0.5 s each: time to act mid-run; no numeric effect
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, ckpt, inject=slow))
    svc.wait_step(ckpt, 2)
    own = svc.api("GET", "/v1/nodes/local/telemetry")["series"]  # the in-process agent's samples of this machine
    assert own["cpu_percent"] and own["mem_percent"]
    assert svc.api("GET", "/v1/nodes")[0]["predicted_risk"] < 0.5  # this healthy CPU node scores low
    svc.api("POST", "/v1/nodes/local/telemetry", json={"samples": failing_gpu_samples(time.time())})
    moved = svc.wait_job(job["id"], ("queued", "succeeded", "failed"))
    assert moved["state"] == "queued", moved  # stopped mid-run; waits: the only node is drained
    node = svc.api("GET", "/v1/nodes")[0]
    assert node["state"] == "drained" and node["predicted_risk"] > 0.5 and node["risk"] is None
    [entry] = svc.wait_audit(job["id"], "node_risk")
    assert entry["decision"] == "drain_migrate" and "no other node is up" in entry["action"]
    assert "(telemetry predictor: " in entry["detection"] and "ecc_6h=" in entry["detection"]
    assert entry["detected_at"] <= entry["acted_at"]
    metrics = httpx.get(svc.url + "/metrics", timeout=30).text
    assert 'wanka_node_telemetry{metric="gpu0_temp_C",node="local"} 74.0' in metrics
    svc.api("POST", "/v1/nodes/local/undrain")  # repaired: the precursors are history now
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["attempt"] == 2 and job["restarts"] == 1
    assert job["result"]["params_sha256"] == clean_sha


@pytest.mark.timeout(900)
def test_straggler_and_throughput_rules_alert(service_factory, corpus_dir, clean_sha, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("straggler: {min_events: 3, action: alert}\nthroughput: {below_pct: 50, min_steps: 3}\n")
    fast = cluster_file(tmp_path / "fast.json", 1e6)
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}", rules=rules, args=("--cluster", str(fast))).start()
    ckpt = tmp_path / "job"
    job = svc.api("POST", "/v1/jobs", json=job_body(corpus_dir, ckpt, inject=[f"slow@step={s},rank=1" for s in (4, 5, 6)]))
    assert job["predicted_tokens_per_s"] > 1e5  # the planner on the absurd spec
    job = svc.wait_job(job["id"], ("succeeded", "failed"))
    assert job["state"] == "succeeded" and job["attempt"] == 1, job
    assert job["result"]["params_sha256"] == clean_sha  # alerts only: the run is untouched
    [straggler] = [a for a in job["audit"] if a["rule"] == "straggler"]
    assert straggler["decision"] == "alert" and "rank(s) [1]" in straggler["detection"]
    assert straggler["detection"].startswith("3 straggler events in attempt 1")
    [slow_run] = [a for a in job["audit"] if a["rule"] == "throughput"]
    assert slow_run["decision"] == "alert" and "(1 - 50%) x predicted" in slow_run["detection"]

    # the same measured run judged in-process against both specs: the absurdly slow one must not fire
    store = Store(open_db(f"sqlite:///{tmp_path / 'judge.db'}")[1])
    store.ensure_node("local", 2)
    sup = Supervisor(store, load_rules(rules))
    spec = parse_job_spec({k: v for k, v in job_body(corpus_dir, ckpt).items() if k != "inject"})
    slow_spec = cluster_file(tmp_path / "slow.json", 1e-6)
    for source, fires in ((fast, True), (slow_spec, False)):
        judged = store.submit(spec, "admin", predicted_tokens_per_s=predict_tokens_per_s(str(source), spec))
        judged = store.update_job(judged["id"], state="running", attempt=1, proc_start=1.0)
        sup._check_throughput(judged, time.time())
        assert [a["rule"] for a in store.audit_log(judged["id"])] == (["throughput"] if fires else []), source
