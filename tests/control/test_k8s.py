"""The `k8s` backend against a stub `kubectl` (kubectl_stub.py, first on PATH): there is no cluster
here, so these tests check what the backend asks kubectl and how it reads the answers, with the
supervisor in-process: the JobSet applied, state read from `get jobset`, restart as a second apply,
cancel as delete, drain as cordon, kubectl errors as one line, and `up`'s refusals."""

import json
import sys
from pathlib import Path

import pytest
import yaml

from wanka.control.backend import TAG, BackendError, exit_path
from wanka.control.db import open_db
from wanka.control.backend import launch_name
from wanka.control.k8s_backend import K8sBackend
from wanka.control.k8s_parse import jobset_state, parse_nodes, quantity
from wanka.control.local_backend import EXIT_SCRIPT
from wanka.control.rules import load_rules
from wanka.control.spec import JobSpec, train_command
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor

STUB = Path(__file__).with_name("kubectl_stub.py")
NODES = {"items": [{"metadata": {"name": n}, "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}}}
                   for n in ("n1", "n2")]}


class Kubectl:
    """The stub's files: what kubectl was asked, and the JobSet states the test scripts."""

    def __init__(self, root: Path):
        self.root = root

    def calls(self) -> list[dict]:
        path = self.root / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def verbs(self, *prefix: str) -> list[list[str]]:
        """argv (namespace flag dropped) of each call starting with `prefix`."""
        out = [[a for a in c["argv"] if not a.startswith("--namespace=")] for c in self.calls()]
        return [a for a in out if a[:len(prefix)] == list(prefix)]

    def applied(self) -> list[dict]:
        return [yaml.safe_load(c["stdin"]) for c in self.calls() if c["argv"][1:2] == ["apply"]]

    def set_condition(self, name: str, kind: str) -> None:
        path = self.root / "jobsets" / f"{name}.json"
        obj = json.loads(path.read_text())
        obj["status"] = {"conditions": [{"type": kind, "status": "True"}],
                         "replicatedJobsStatus": [{"name": "trainer", "ready": 0, "active": 0,
                                                   "succeeded": int(kind == "Completed"), "failed": int(kind == "Failed")}]}
        path.write_text(json.dumps(obj))

    def fail(self, verb: str, line: str) -> None:
        (self.root / "fail.json").write_text(json.dumps({verb: line}))


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    root = tmp_path / "kubectl"
    (root / "bin").mkdir(parents=True)
    exe = root / "bin" / "kubectl"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {STUB} \"$@\"\n")
    exe.chmod(0o755)
    (root / "nodes.json").write_text(json.dumps(NODES))
    monkeypatch.setenv("PATH", f"{root / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("KUBECTL_STUB_DIR", str(root))
    return Kubectl(root)


@pytest.fixture
def shared(tmp_path):
    (tmp_path / "shared").mkdir()
    return tmp_path / "shared"


@pytest.fixture
def plane(tmp_path, kubectl, shared):
    """A store with the stub cluster's nodes, a k8s backend and an in-process supervisor."""
    backend = K8sBackend.connect(image="registry.local/wanka:1", volume="ckpt", mount_path=str(shared))
    store = Store(open_db(f"sqlite:///{tmp_path / 'state.db'}")[1])
    for name, slots in backend.nodes():
        store.ensure_node(name, slots)
    return store, Supervisor(store, load_rules(), backend), backend


def submit(store, shared, name="a", **extra):
    spec = JobSpec(model="tiny", layout="dp=2", steps=4, ckpt=str(shared / name), **extra).checked()
    return store.submit(spec, "alice")


def test_parsers_read_jobset_state_and_node_capacity():
    def status(**st):
        return {"status": st}

    ready = [{"name": "trainer", "ready": 1, "active": 1}]
    assert jobset_state(status(replicatedJobsStatus=ready)) == "Running"
    assert jobset_state(status(replicatedJobsStatus=[{"name": "trainer", "ready": 0, "active": 1}])) == "Pending"
    assert jobset_state({}) == "Pending"  # just created: no status yet
    assert jobset_state(status(conditions=[{"type": "Failed", "status": "False"}], replicatedJobsStatus=ready)) == "Running"
    assert jobset_state(status(conditions=[{"type": "Suspended", "status": "True"}])) == "Suspended"
    assert jobset_state(status(conditions=[{"type": "Completed", "status": "True"}])) == "Completed"
    assert quantity("8") == 8 and quantity("7800m") == 7 and quantity("1Gi") == 0
    nodes = {"items": [{"metadata": {"name": "g1"}, "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": "8"}}},
                       {"metadata": {"name": "c1"}, "status": {"allocatable": {"cpu": "3900m"}}}, {"metadata": {}}]}
    assert parse_nodes(nodes) == [("g1", 96, 8), ("c1", 3, 0)]


def test_a_pending_jobset_is_alive_but_not_on_the_hang_clock(plane, kubectl, shared):
    store, sup, backend = plane
    job = submit(store, shared)
    sup.tick()
    job = store.job(job["id"])
    path = kubectl.root / "jobsets" / f"{job['backend_id']}.json"
    obj = json.loads(path.read_text())
    path.write_text(json.dumps({**obj, "status": {"replicatedJobsStatus": [{"name": "trainer", "ready": 0, "active": 1}]}}))
    assert backend.alive(job) and backend.started_at(job) is None
    path.write_text(json.dumps(obj))  # ready again: the clock starts now, and stays
    first = backend.started_at(job)
    assert first is not None and backend.started_at(job) == first


def test_launch_applies_one_jobset_running_the_local_train_command(plane, kubectl, shared):
    store, sup, backend = plane
    job = submit(store, shared)
    sup.tick()
    job = store.job(job["id"])
    (manifest,) = kubectl.applied()
    assert job["state"] == "running" and job["backend_id"] == launch_name(job, 1) == manifest["metadata"]["name"]
    assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and manifest["kind"] == "JobSet"
    labels = {"wanka.job-id": str(job["id"]), "wanka.attempt": "1"}
    assert labels.items() <= manifest["metadata"]["labels"].items()
    spec = manifest["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    (rjob,) = spec["replicatedJobs"]
    assert rjob["replicas"] == 1 and rjob["template"]["spec"]["parallelism"] == rjob["template"]["spec"]["completions"] == 1
    assert rjob["template"]["spec"]["backoffLimit"] == 0
    pod = rjob["template"]["spec"]["template"]
    assert labels.items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.local/wanka:1"
    assert container["command"][:4] == ["/bin/sh", "-c", EXIT_SCRIPT, "wanka-control-launch"]
    assert container["command"][4:] == train_command(job)  # the very command the local backend runs
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[TAG] == f"{job['id']}:1" and env["WANKA_CONTROL_EXIT"] == str(exit_path(job["ckpt"], 1))
    assert container["resources"] == {"requests": {"cpu": "2"}}  # a CPU node: nproc CPUs
    assert {"name": "shared", "mountPath": str(shared)} in container["volumeMounts"]
    assert {"name": "shared", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["spec"]["volumes"]
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchFields"][0]["values"] == [job["node"]] and job["node"] in ("n1", "n2")
    backend.gpu_nodes = {"n1"}
    gpu = backend.manifest(job, 1, "n1", ["true"])["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert gpu["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}


def test_completed_jobset_with_exit_0_succeeds(plane, kubectl, shared):
    store, sup, _ = plane
    job = submit(store, shared)
    sup.tick()
    sup.tick()
    job = store.job(job["id"])
    assert job["state"] == "running"  # the stub reports the JobSet ready: still running
    exit_path(job["ckpt"], 1).write_text("0\n")  # what the pod's leader script writes on the shared volume
    (Path(job["ckpt"]) / "result.json").write_text(json.dumps({"params_sha256": "abc"}))
    kubectl.set_condition(job["backend_id"], "Completed")
    sup.tick()
    job = store.job(job["id"])
    assert job["state"] == "succeeded" and job["result"] == {"params_sha256": "abc"}
    assert len(kubectl.applied()) == 1


def test_failed_jobset_restarts_as_a_second_apply(plane, kubectl, shared):
    store, sup, _ = plane
    job = submit(store, shared)
    sup.tick()
    first = store.job(job["id"])
    kubectl.set_condition(first["backend_id"], "Failed")  # no exit file: the pod died before writing one
    sup.tick()
    job = store.job(job["id"])
    applied = kubectl.applied()
    assert job["state"] == "running" and job["attempt"] == 2 and job["restarts"] == 1
    assert [m["metadata"]["labels"]["wanka.attempt"] for m in applied] == ["1", "2"]
    assert job["backend_id"] == applied[1]["metadata"]["name"] != first["backend_id"]
    (row,) = [a for a in store.audit_log(job["id"]) if a["rule"] == "dead_rank"]
    assert row["decision"] == "restart" and "without an exit code" in row["detection"]


def test_cancel_deletes_the_jobset_and_a_hang_kills_its_pods(plane, kubectl, shared):
    store, sup, backend = plane
    job = submit(store, shared)
    sup.tick()
    name = store.job(job["id"])["backend_id"]
    store.request_cancel(job["id"])
    sup.tick()
    assert store.job(job["id"])["state"] == "cancelled"
    assert kubectl.verbs("delete", "jobset") == [["delete", "jobset", name, "--ignore-not-found", "--wait=false",
                                                  "--cascade=foreground"]]
    assert kubectl.verbs("delete", "pods") == []  # a cancel is graceful
    other = submit(store, shared, name="b")
    sup.tick()
    other = store.job(other["id"])
    assert "(still ending)" not in backend.stop(other, graceful_s=0)
    (pods,) = kubectl.verbs("delete", "pods")
    assert "--grace-period=0" in pods and "--force" in pods
    assert pods[pods.index("-l") + 1].startswith(f"wanka.job-id={other['id']},wanka.attempt=1,")


def test_drain_cordons_and_undrain_uncordons(plane, kubectl):
    store, sup, _ = plane
    store.set_node("n1", state="drained")
    sup.tick()
    store.set_node("n1", state="up")
    sup.tick()
    assert kubectl.verbs("cordon") == [["cordon", "n1"]] and kubectl.verbs("uncordon") == [["uncordon", "n1"]]


def test_kubectl_errors_are_one_line(plane, kubectl, shared, capfd):
    store, sup, backend = plane
    kubectl.fail("cordon", 'Error from server (Forbidden): nodes "n1" is forbidden')
    store.set_node("n1", state="drained")
    sup.tick()
    (row,) = [a for a in store.audit_log() if a["rule"] == "backend"]
    assert row["detection"] == 'kubectl cordon n1 failed: Error from server (Forbidden): nodes "n1" is forbidden'
    kubectl.fail("apply", "error: the server doesn't have a resource type \"jobsets\"")
    job = submit(store, shared)
    sup.tick()
    job = store.job(job["id"])
    assert job["state"] == "failed" and "\n" not in job["error"] and "kubectl apply -f - failed: error:" in job["error"]
    kubectl.fail("get", "Unable to connect to the server: dial tcp 10.0.0.1:6443: i/o timeout")
    running = {**job, "state": "running", "backend_id": "wanka-x", "attempt": 1}
    assert backend.alive(running) and backend.alive(running)  # an unreachable API server is not a dead rank
    err = capfd.readouterr().err
    assert err.count("wanka control: k8s: kubectl get jobset") == 1 and "Traceback" not in err
    outside = {**running, "ckpt": "/elsewhere/run"}
    with pytest.raises(BackendError, match="not on the shared volume ckpt"):
        backend.launch(outside, 1, "n1", ["true"])


def test_a_restarted_service_readopts_by_launch_name(plane, kubectl, shared, tmp_path):
    store, sup, _ = plane
    running = submit(store, shared, name="a")
    uncommitted = submit(store, shared, name="b")
    sup.tick()
    # the service died between `kubectl apply` and committing `running` for job b:
    store.update_job(uncommitted["id"], state="launching", backend_id=None)
    again = Supervisor(store, load_rules(), K8sBackend.connect(image="registry.local/wanka:1", volume="ckpt",
                                                               mount_path=str(shared)))
    adopted = again.recover()
    assert sorted(a["job_id"] for a in adopted) == sorted([running["id"], uncommitted["id"]])
    assert len(kubectl.applied()) == 2  # nothing launched twice
    b = store.job(uncommitted["id"])
    assert b["state"] == "running" and b["backend_id"] == launch_name(b, 1)


@pytest.mark.parametrize("args, path, line", [
    (("--backend", "k8s", "--k8s-volume", "ckpt"), None, "k8s-image: expected a container image"),
    (("--backend", "k8s", "--k8s-image", "wanka:1", "--k8s-volume", "ckpt", "--k8s-namespace", "Team_A"), None,
     "k8s-namespace: expected a Kubernetes namespace"),
    (("--backend", "k8s", "--k8s-image", "wanka:1"), None, "k8s-volume: expected the PersistentVolumeClaim"),
    (("--backend", "k8s", "--k8s-image", "wanka:1", "--k8s-volume", "ckpt", "--k8s-mount-path", "shared"), None,
     "k8s-mount-path: expected an absolute path"),
    (("--backend", "k8s", "--k8s-image", "wanka:1", "--k8s-volume", "ckpt"), "/nonexistent",
     "backend: expected k8s: kubectl and a cluster serving JobSets (kubectl not found on PATH)"),
    (("--k8s-image", "wanka:1"), None, "k8s-image: expected only with --backend k8s"),
])
def test_up_refuses_bad_k8s_options(run_cli, kubectl, tmp_path, monkeypatch, args, path, line):
    if path:
        monkeypatch.setenv("PATH", path)
    code, out, err = run_cli("control", "up", "--state-dir", str(tmp_path / "state"), *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and line in err, err
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_up_backend_k8s_survives_kill9_without_a_second_apply(service_factory, kubectl, shared, tmp_path):
    """`wanka control up --backend k8s` as a real process: submit -> apply; kill -9 and start again ->
    the JobSet is re-adopted by name, not applied again; Completed + exit file 0 -> succeeded."""
    svc = service_factory(f"sqlite:///{tmp_path / 'state.db'}", args=(
        "--backend", "k8s", "--k8s-image", "registry.local/wanka:1", "--k8s-volume", "ckpt",
        "--k8s-mount-path", str(shared), "--k8s-namespace", "team-a")).start()

    job = svc.api("POST", "/v1/jobs", json={"layout": "dp=2", "steps": 4, "ckpt": str(shared / "a")})
    running = svc.wait_job(job["id"], ("running",), timeout_s=120)
    checks = [c for c in kubectl.calls() if c["argv"][0] == "cluster-info" or c["argv"][:2] == ["get", "crd"]]
    assert len(checks) == 2 and all("--namespace=team-a" in c["argv"] for c in kubectl.calls() if c not in checks)
    svc.kill9()
    svc.start()
    assert "re-adopted 1 running job(s)" in (svc.state_dir / "service-2.log").read_text()
    exit_path(running["ckpt"], 1).write_text("0\n")
    (shared / "a" / "result.json").write_text(json.dumps({"params_sha256": "abc"}))
    kubectl.set_condition(running["backend_id"], "Completed")
    done = svc.wait_job(job["id"], ("succeeded",), timeout_s=120)
    assert done["attempt"] == 1 and len(kubectl.applied()) == 1  # nothing launched twice


def test_a_refused_delete_keeps_the_job_and_is_retried(plane, kubectl, shared):
    store, sup, _ = plane
    job = submit(store, shared)
    sup.tick()
    kubectl.fail("delete", 'Error from server (Forbidden): jobsets.jobset.x-k8s.io "x" is forbidden')
    store.request_cancel(job["id"])
    with pytest.raises(BackendError) as refused:  # Supervisor.run writes it as one line and retries next pass
        sup.tick()
    assert "\n" not in str(refused.value) and str(refused.value).startswith("kubectl delete jobset")
    assert store.job(job["id"])["state"] == "running"
    (kubectl.root / "fail.json").unlink()
    sup.tick()
    assert store.job(job["id"])["state"] == "cancelled"
