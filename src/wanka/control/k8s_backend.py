"""The `k8s` backend: `wanka control up --backend k8s` needs kubectl and a reachable cluster with
the JobSet API (jobset.x-k8s.io); without them it refuses to start with one line (exit 2)."""

from __future__ import annotations

import shutil
import subprocess

from wanka.errors import SpecError

TIMEOUT_S = 30  # one kubectl call against the API server


def kubectl_ready(kubectl: str = "kubectl") -> str | None:
    """None when kubectl is installed, reaches a cluster, and the cluster serves JobSets; else why not."""
    if shutil.which(kubectl) is None:
        return "kubectl not found on PATH"
    for args, what in ((["cluster-info"], "no reachable cluster"),
                       (["get", "crd", "jobsets.jobset.x-k8s.io"], "the JobSet API (jobset.x-k8s.io) is not installed")):
        try:
            out = subprocess.run([kubectl, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{what} ({exc})"
        if out.returncode != 0:
            return f"{what} (kubectl {args[0]}: {(out.stderr.strip().splitlines() or ['exit ' + str(out.returncode)])[-1]})"
    return None


class K8sBackend:
    name = "k8s"

    @classmethod
    def connect(cls) -> "K8sBackend":
        why = kubectl_ready()
        if why is not None:
            raise SpecError("backend", f"k8s: kubectl and a cluster serving JobSets ({why})")
        raise SpecError("backend", "k8s: launching through kubectl is not built yet (docs/control.md 'Backends')")
