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

import json
import re
import shlex

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


def jobset_manifest(name: str, nodes: int, gpus_per_node: int, train_args: str, image: str,
                    topology: str | None = None, queue: str | None = None, pvc: str | None = None) -> str:
    """`pvc`: a PersistentVolumeClaim mounted at /shared (where --data-dir and --ckpt-dir live by
    default). /dev/shm is always a memory-backed emptyDir: the container runtime's 64 MB default is
    too small for PyTorch's data-loader workers and NCCL's shared-memory transport."""
    endpoint = f"{name}-trainer-0-0.{name}:29500"
    cmd = _torchrun(nodes, gpus_per_node, endpoint, train_args).replace("$JOB_ID", name)
    meta_labels = f"\n  labels:\n    kueue.x-k8s.io/queue-name: {queue}" if queue else ""
    shared_mount = "\n              - name: shared\n                mountPath: /shared" if pvc else ""
    shared_volume = (f"\n            - name: shared\n              persistentVolumeClaim:\n                claimName: {pvc}"
                     if pvc else "")
    topo = (f"\n          metadata:\n            annotations:\n              kueue.x-k8s.io/podset-preferred-topology: {topology}" if topology else "")
    return f"""apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}{meta_labels}
spec:
  failurePolicy:
    maxRestarts: 3
  network:
    enableDNSHostnames: true
    subdomain: {name}
  replicatedJobs:
  - name: trainer
    replicas: 1
    template:
      spec:
        parallelism: {nodes}
        completions: {nodes}
        backoffLimit: 0
        completionMode: Indexed
        template:{topo}
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: {image}
              command: ["bash", "-c", {json.dumps(cmd)}]
              resources:
                limits:
                  nvidia.com/gpu: {gpus_per_node}
              volumeMounts:
              - name: dshm
                mountPath: /dev/shm{shared_mount}
            volumes:
            - name: dshm
              emptyDir:
                medium: Memory{shared_volume}
"""


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
