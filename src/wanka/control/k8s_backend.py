"""The `k8s` backend: each launch is one JobSet (jobset.x-k8s.io/v1alpha2) running the `wanka train
--max-restarts 0` command the `local` backend runs, built by the JobSet definition `wanka launch k8s`
uses (wanka.train.launch.jobset).

    wanka control up --backend k8s --k8s-image REGISTRY/wanka:TAG --k8s-volume CLAIM \\
        [--k8s-mount-path /shared] [--k8s-namespace default]

Mapping (kubectl reference: apply, get, delete, cordon/uncordon):
- inventory: `kubectl get nodes -o json`: each node's allocatable nvidia.com/gpu, else its CPUs.
- launch: `kubectl apply -f -` of a JobSet `wanka-JOB-ATTEMPT-HASH` (HASH: of the checkpoint dir, as
  the slurm backend's job name) labelled wanka.job-id / wanka.attempt / wanka.ckpt-hash, one pod
  pinned to the node wanka's scheduler chose, restartPolicy Never, backoffLimit 0 and
  failurePolicy.maxRestarts 0: the control plane decides restarts, Kubernetes must not run an
  attempt twice. The checkpoint dir lies on the PVC `--k8s-volume`, mounted in the pod at
  `--k8s-mount-path`, where this service sees the same filesystem; the pod runs the local backend's
  leader script, so its log and exit code land in CKPT/control/attempt-N.{log,exit}.
- alive / started: `kubectl get jobset NAME -o json` (k8s_parse.jobset_state): alive until a
  Completed or Failed condition; NotFound = gone. The hang clock starts when this service first
  sees every Job ready (after a restart of the service: when it sees that again).
- exit code: the exit file, else the JobSet's condition (Completed -> 0; Failed -> unknown).
- stop: `kubectl delete jobset NAME --ignore-not-found --wait=false --cascade=foreground`; for a hang
  also `kubectl delete pods -l LABELS --grace-period=0 --force` (SIGKILL now, not after the pods'
  grace period); then waits, bounded, until the JobSet is gone.
- adopt after a restart of the service: by the JobSet name (stored in `jobs.backend_id`, or derived
  from job, attempt and checkpoint dir for an attempt never committed as running).
- drain / undrain: `kubectl cordon NODE` / `kubectl uncordon NODE`.
A failing kubectl call raises `BackendError` (one line); where the supervisor only asks (alive,
started), it is written once to stderr and the job is taken as still alive.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from wanka.control.backend import (TAG, BackendError, Launched, SayOnce, ckpt_hash, control_dir, exit_path, launch_name,
                                   log_path, read_exit_file, run_client, tag_of, wait_until)
from wanka.control.k8s_parse import DNS_LABEL, DNS_SUBDOMAIN, IMAGE, TERMINAL, created_at, jobset_state, parse_nodes
from wanka.errors import SpecError

TIMEOUT_S = 30  # one kubectl call against the API server
LAUNCHER = "wanka-control-launch"


def kubectl_ready(kubectl: str = "kubectl", path: str | None = None) -> str | None:
    """None when kubectl is installed, reaches a cluster, and the cluster serves JobSets; else why not."""
    exe = shutil.which(kubectl, path=path)
    if exe is None:
        return "kubectl not found on PATH"
    for args, what in ((["cluster-info"], "no reachable cluster"),
                       (["get", "crd", "jobsets.jobset.x-k8s.io"], "the JobSet API (jobset.x-k8s.io) is not installed")):
        try:
            out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{what} ({exc})"
        if out.returncode != 0:
            return f"{what} (kubectl {args[0]}: {(out.stderr.strip().splitlines() or ['exit ' + str(out.returncode)])[-1]})"
    return None


def launch_labels(job: dict, attempt: int) -> dict[str, str]:
    return {"wanka.job-id": str(job["id"]), "wanka.attempt": str(attempt), "wanka.ckpt-hash": ckpt_hash(job)}


def check_k8s_options(image: str | None, namespace: str, volume: str | None, mount_path: str) -> None:
    """The --k8s-* flags of `up` (SpecError naming the flag)."""
    if not image or not IMAGE.match(image):
        raise SpecError("k8s-image", "a container image with wanka installed, e.g. registry/wanka:1.0", image or "(none)")
    if not DNS_LABEL.match(namespace):
        raise SpecError("k8s-namespace", "a Kubernetes namespace (RFC 1123 label: a-z, 0-9, '-', at most 63)", namespace)
    if not volume or not DNS_SUBDOMAIN.match(volume):
        raise SpecError("k8s-volume", "the PersistentVolumeClaim holding the checkpoint dirs (RFC 1123 subdomain)",
                        volume or "(none)")
    if not mount_path.startswith("/") or not all(part and part not in (".", "..") for part in mount_path.split("/")[1:]) \
            or any(c.isspace() or c in "\"'$`\\:" for c in mount_path):
        raise SpecError("k8s-mount-path", "an absolute path without '.', '..', spaces or quotes", mount_path)


class K8sBackend:
    name = "k8s"

    def __init__(self, image: str, volume: str, mount_path: str = "/shared", namespace: str = "default",
                 env: dict | None = None):
        self.image, self.volume, self.mount_path, self.namespace, self.env = image, volume, mount_path, namespace, env
        self.kubectl = shutil.which("kubectl", path=(env or os.environ).get("PATH")) or "kubectl"
        self.gpu_nodes: set[str] = set()
        self._running_since: dict[str, float] = {}  # JobSet name -> when this service first saw it running
        self._say_once = SayOnce("k8s")

    @classmethod
    def connect(cls, image: str | None = None, namespace: str | None = None, volume: str | None = None,
                mount_path: str | None = None, env: dict | None = None) -> "K8sBackend":
        """A backend with valid options whose cluster answers and serves JobSets (SpecError otherwise)."""
        namespace, mount_path = namespace or "default", mount_path or "/shared"
        check_k8s_options(image, namespace, volume, mount_path)
        why = kubectl_ready(path=(env or os.environ).get("PATH"))
        if why is not None:
            raise SpecError("backend", f"k8s: kubectl and a cluster serving JobSets ({why})")
        backend = cls(image, volume, mount_path, namespace, env)
        try:
            if not backend.nodes():
                raise SpecError("backend", "k8s: a cluster with nodes (kubectl get nodes listed none)")
        except BackendError as exc:
            raise SpecError("backend", f"k8s: a cluster that lists its nodes ({exc})") from None
        return backend

    # ---- kubectl calls -----------------------------------------------------------------------
    def _run(self, *args: str, stdin: str | None = None) -> str:
        return run_client([self.kubectl, f"--namespace={self.namespace}", *args], ["kubectl", *args[:3]], self.env,
                          TIMEOUT_S, stdin)

    def _get(self, name: str) -> dict | None:
        """The JobSet as kubectl prints it; None when the API server has no such JobSet."""
        try:
            text = self._run("get", "jobset", name, "-o", "json")
        except BackendError as exc:
            if "notfound" in str(exc).lower().replace(" ", ""):
                return None
            raise
        try:
            return json.loads(text)
        except ValueError:
            raise BackendError(f"kubectl get jobset {name}: not JSON") from None

    def _state(self, job: dict) -> str | None:
        name = job["backend_id"] or launch_name(job, job["attempt"])
        obj = self._get(name)
        state = None if obj is None else jobset_state(obj)
        if state == "Running":
            self._running_since.setdefault(name, time.time())
        return state

    # ---- the Backend interface ---------------------------------------------------------------
    def nodes(self) -> list[tuple[str, int]]:
        try:
            rows = parse_nodes(json.loads(self._run("get", "nodes", "-o", "json")))
        except ValueError:
            raise BackendError("kubectl get nodes: not JSON") from None
        self.gpu_nodes = {name for name, _, gpus in rows if gpus}
        return [(name, gpus or cpus) for name, cpus, gpus in rows]

    def manifest(self, job: dict, attempt: int, node: str | None, command: list[str]) -> dict:
        """The JobSet of one launch: the local backend's leader script around `command`, in one pod."""
        from wanka.control.local_backend import EXIT_SCRIPT
        from wanka.train.launch import jobset

        ckpt = job["ckpt"]
        env = {TAG: tag_of(job["id"], attempt), "WANKA_CONTROL_LOG": str(log_path(ckpt, attempt)),
               "WANKA_CONTROL_EXIT": str(exit_path(ckpt, attempt)), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
        gpus = job["nproc"] if node in self.gpu_nodes else 0
        return jobset(launch_name(job, attempt), 1, ["/bin/sh", "-c", EXIT_SCRIPT, LAUNCHER, *command], self.image,
                      gpus_per_node=gpus, cpus_per_node=None if gpus else job["nproc"], pvc=self.volume,
                      mount_path=self.mount_path, max_restarts=0, labels=launch_labels(job, attempt), env=env, node=node)

    def launch(self, job: dict, attempt: int, node: str | None, command: list[str]) -> Launched:
        from wanka.train.launch import to_yaml

        if not Path(job["ckpt"]).is_relative_to(self.mount_path):
            raise BackendError(f"checkpoint dir {job['ckpt']} is not on the shared volume {self.volume} "
                               f"(mounted at {self.mount_path})")
        control_dir(job["ckpt"]).mkdir(parents=True, exist_ok=True)
        exit_path(job["ckpt"], attempt).unlink(missing_ok=True)
        manifest = self.manifest(job, attempt, node, command)
        self._run("apply", "-f", "-", stdin=to_yaml(manifest))
        return Launched(proc_start=time.time(), backend_id=manifest["metadata"]["name"])

    def alive(self, job: dict) -> bool:
        try:
            state = self._state(job)
        except BackendError as exc:
            self._say_once(f"{exc}; running jobs are taken as still running until the API server answers")
            return True
        return state is not None and state not in TERMINAL

    def started_at(self, job: dict) -> float | None:
        name = job["backend_id"] or launch_name(job, job["attempt"])
        try:
            state = self._state(job)
        except BackendError:
            return job["proc_start"]
        if state in ("Pending", "Suspended"):
            return None  # waits for a node or an image: not watched for hangs
        return self._running_since.get(name, job["proc_start"])

    def exit_code(self, job: dict) -> int | None:
        code = read_exit_file(job["ckpt"], job["attempt"])
        if code is not None:
            return code
        try:
            state = self._state(job)
        except BackendError as exc:
            self._say_once(str(exc))
            return None
        return 0 if state == "Completed" else None

    def describe(self, job: dict) -> str:
        name = job["backend_id"] or launch_name(job, job["attempt"])
        try:
            state = self._state(job)
        except BackendError:
            state = None
        return f"JobSet {self.namespace}/{name}" + (f" ({state})" if state else "")

    def adopt(self, job: dict) -> Launched | None:
        """An attempt kubectl accepted but the DB never recorded: its JobSet has a known name."""
        name = launch_name(job, job["attempt"])
        obj = self._get(name)
        if obj is None:
            return None
        return Launched(proc_start=created_at(obj) or time.time(), backend_id=name)

    def stop(self, job: dict, graceful_s: float = 20.0) -> str:
        name = job["backend_id"] or launch_name(job, job["attempt"])
        self._run("delete", "jobset", name, "--ignore-not-found", "--wait=false", "--cascade=foreground")
        if graceful_s <= 0:
            selector = ",".join(f"{k}={v}" for k, v in launch_labels(job, job["attempt"]).items())
            self._run("delete", "pods", "-l", selector, "--ignore-not-found", "--wait=false", "--grace-period=0", "--force")
        self._running_since.pop(name, None)
        gone = wait_until(lambda: self._get(name) is None, graceful_s + 60, poll_s=0.5)
        return f"JobSet {self.namespace}/{name}" + ("" if gone else " (still ending)")

    def drain(self, node: str, reason: str) -> None:
        self._run("cordon", node)  # the reason stays in wanka's audit log: cordon has no reason field

    def undrain(self, node: str) -> None:
        self._run("uncordon", node)
