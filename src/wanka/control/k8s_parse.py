"""Reading kubectl's JSON for the `k8s` backend: a JobSet's state and the cluster's nodes.

Field names: JobSet v1alpha2 (jobset/api/jobset/v1alpha2/jobset_types.go: `status.conditions` with
types Completed / Failed / Suspended, `status.replicatedJobsStatus[].{ready,active,succeeded,failed,suspended}`,
as also listed in kubernetes-sigs/jobset sdk/python/docs/JobsetV1alpha2ReplicatedJobStatus.md);
core/v1 Node (`status.allocatable`, quantities as in k8s.io/apimachinery/pkg/api/resource).
"""

from __future__ import annotations

import re
from datetime import datetime

TERMINAL = ("Completed", "Failed")
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name (k8s-device-plugin README)

# names Kubernetes accepts (k8s.io/apimachinery/pkg/util/validation/validation.go)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label: namespaces
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")  # PVCs
# an image reference: [registry[:port]/]path[:tag][@digest] without spaces or shell/YAML specials
IMAGE = re.compile(r"^[a-z0-9][a-z0-9._/:-]*(@sha256:[a-f0-9]{64})?$", re.IGNORECASE)


def _condition(obj: dict, kind: str) -> bool:
    return any(c.get("type") == kind and str(c.get("status")) == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def jobset_state(obj: dict) -> str:
    """Completed | Failed | Suspended | Running (a pod of every Job ready) | Pending (created, not all running)."""
    for kind in (*TERMINAL, "Suspended"):
        if _condition(obj, kind):
            return kind
    rows = (obj.get("status") or {}).get("replicatedJobsStatus") or []
    return "Running" if rows and all(int(r.get("ready") or 0) > 0 for r in rows) else "Pending"


def created_at(obj: dict) -> float | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None
    except ValueError:
        return None


def quantity(text: str | int) -> int:
    """A whole-unit Kubernetes quantity, rounded down: "8" -> 8, "7800m" -> 7; unreadable -> 0."""
    text = str(text)
    try:
        return int(text[:-1]) // 1000 if text.endswith("m") else int(text)
    except ValueError:
        return 0


def parse_nodes(obj: dict) -> list[tuple[str, int, int]]:
    """`kubectl get nodes -o json` -> (name, allocatable CPUs, allocatable GPUs); nodes without a name skipped."""
    out = []
    for item in obj.get("items") or []:
        name = (item.get("metadata") or {}).get("name")
        alloc = (item.get("status") or {}).get("allocatable") or {}
        if name:
            out.append((name, quantity(alloc.get("cpu", 0)), quantity(alloc.get(GPU_RESOURCE, 0))))
    return out
