"""`wanka launch slurm|k8s`: job files that run `python -m wanka.train.main` on N nodes.

slurm: an sbatch script, one srun task per node, each starting a torchrun agent with c10d
rendezvous on the first node (the pattern of torchtitan's multinode_trainer.slurm). Topology:
`--switches N[@MIN]` asks topology/tree for at most N leaf switches (sbatch --switches), and
`--segment S` asks topology/block for segments of S nodes (Slurm >= 23.11).
k8s: a JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job of N indexed pods, rendezvous at
the headless service of pod 0, and a Kueue topology-aware-scheduling annotation when `--topology`
names a node label (kueue.x-k8s.io/podset-preferred-topology).
"""

from __future__ import annotations

import re

import yaml

from wanka.errors import SpecError

# RFC 1123 label: what Kubernetes accepts as a JobSet name (also a safe Slurm job name); JobSet
# derives pod host names "{name}-trainer-0-{i}" from it, which must stay within 63 characters.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
_SWITCHES = re.compile(r"^\d+(@(\d+-)?\d+(:\d{1,2}){0,2})?$")  # N or N@TIME (sbatch time formats)
_SAFE = re.compile(r"^[\w./:@%+=,-]+$")  # values written into #SBATCH lines / YAML scalars unquoted


def _torchrun(nodes: int, gpus: int, endpoint: str, train_args: str) -> str:
    return (f"torchrun --nnodes={nodes} --nproc-per-node={gpus} --max-restarts=3 "
            f"--rdzv-backend=c10d --rdzv-id=$JOB_ID --rdzv-endpoint={endpoint} "
            f"-m wanka.train.main {train_args}")


def slurm_script(name: str, nodes: int, gpus_per_node: int, train_args: str, switches: str | None = None,
                 segment: int | None = None, partition: str | None = None, time_limit: str = "24:00:00") -> str:
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={gpus_per_node}", f"#SBATCH --time={time_limit}", "#SBATCH --exclusive"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if switches:
        lines.append(f"#SBATCH --switches={switches}")
    if segment:
        lines.append(f"#SBATCH --segment={segment}")
    lines += ["", "set -euo pipefail",
              'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "export JOB_ID=$SLURM_JOB_ID",
              "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
              "",
              "srun --kill-on-bad-exit=1 " + _torchrun(nodes, gpus_per_node, "$HEAD:29500", train_args), ""]
    return "\n".join(lines)


def jobset(name: str, nodes: int, command: list[str], image: str, gpus_per_node: int = 0,
           cpus_per_node: int | None = None, topology: str | None = None, queue: str | None = None,
           pvc: str | None = None, mount_path: str = "/shared", max_restarts: int = 3,
           labels: dict[str, str] | None = None, env: dict[str, str] | None = None,
           node: str | None = None) -> dict:
    """The one definition of wanka's JobSet (jobset.x-k8s.io/v1alpha2), as a dict: one replicated Job
    `trainer` of `nodes` indexed pods (pod i is "{name}-trainer-0-i"), restartPolicy Never and
    backoffLimit 0 so a failed pod fails its Job, and `failurePolicy.maxRestarts` whole-JobSet
    restarts (JobSet API: jobset/api/jobset/v1alpha2/jobset_types.go, FailurePolicy).

    `pvc`: a PersistentVolumeClaim mounted at `mount_path` (data and checkpoints). /dev/shm is always
    a memory-backed emptyDir: the container runtime's 64 MB default is too small for PyTorch's
    data-loader workers and NCCL's shared-memory transport. `gpus_per_node` > 0 asks for
    nvidia.com/gpu, else `cpus_per_node` CPUs. `node`: pin the pods to that node by name (a
    required node affinity on metadata.name, how a DaemonSet pins its pods). `labels` go on the
    JobSet and its pods, `env` into the container."""
    resources = ({"limits": {"nvidia.com/gpu": gpus_per_node}} if gpus_per_node > 0
                 else {"requests": {"cpu": str(cpus_per_node)}} if cpus_per_node else {})
    container: dict = {"name": "trainer", "image": image, "command": list(command)}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if resources:
        container["resources"] = resources
    container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if pvc:
        container["volumeMounts"].append({"name": "shared", "mountPath": mount_path})
        volumes.append({"name": "shared", "persistentVolumeClaim": {"claimName": pvc}})
    pod_spec: dict = {"restartPolicy": "Never", "containers": [container], "volumes": volumes}
    if node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                                 {"nodeSelectorTerms": [term]}}}
    pod_meta: dict = {}
    if labels:
        pod_meta["labels"] = dict(labels)
    if topology:
        pod_meta["annotations"] = {"kueue.x-k8s.io/podset-preferred-topology": topology}
    pod_template = ({"metadata": pod_meta} if pod_meta else {}) | {"spec": pod_spec}
    meta_labels = dict(labels or {}) | ({"kueue.x-k8s.io/queue-name": queue} if queue else {})
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name} | ({"labels": meta_labels} if meta_labels else {}),
        "spec": {
            "failurePolicy": {"maxRestarts": max_restarts},
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "replicatedJobs": [{"name": "trainer", "replicas": 1, "template": {"spec": {
                "parallelism": nodes, "completions": nodes, "backoffLimit": 0, "completionMode": "Indexed",
                "template": pod_template}}}],
        },
    }


def to_yaml(manifest: dict) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, width=100_000)


def jobset_manifest(name: str, nodes: int, gpus_per_node: int, train_args: str, image: str,
                    topology: str | None = None, queue: str | None = None, pvc: str | None = None) -> str:
    """`wanka launch k8s`: torchrun on every pod, c10d rendezvous at pod 0's headless-service name."""
    endpoint = f"{name}-trainer-0-0.{name}:29500"
    cmd = _torchrun(nodes, gpus_per_node, endpoint, train_args).replace("$JOB_ID", name)
    return to_yaml(jobset(name, nodes, ["bash", "-c", cmd], image, gpus_per_node=gpus_per_node,
                          topology=topology, queue=queue, pvc=pvc))


def check_launch(nodes: int, gpus_per_node: int, layout_gpus_ok, name: str = "wanka-train",
                 switches: str | None = None, segment: int | None = None, **plain: str | None) -> None:
    """Validate the flags before writing a job file. `plain`: flags whose values go into the file
    unquoted (partition, image, topology, queue)."""
    if not _NAME.match(name):
        raise SpecError("name", "lowercase letters, digits and '-' (an RFC 1123 name, at most 40 characters)", name)
    if switches is not None and not _SWITCHES.match(switches):
        raise SpecError("switches", "N or N@HH:MM:SS (max leaf switches, optional max wait)", switches)
    if segment is not None and not 1 <= segment <= nodes:
        raise SpecError("segment", f"an integer in 1..{nodes} (nodes per topology block segment)", segment)
    for flag, value in plain.items():
        if value is not None and not _SAFE.match(value):
            raise SpecError(flag, "a value without spaces or shell/YAML special characters", value)
    if nodes < 1:
        raise SpecError("nodes", "an integer >= 1", nodes)
    if gpus_per_node < 1:
        raise SpecError("gpus-per-node", "an integer >= 1", gpus_per_node)
    layout_gpus_ok(nodes * gpus_per_node)
