"""A stand-in `kubectl` for tests without a cluster (the k8s backend's tests put it first on PATH).

It appends each call's argv and stdin to $KUBECTL_STUB_DIR/calls.jsonl and answers from files there:
jobsets/NAME.json (what `apply` stored, with a `status` the test scripts), nodes.json (the answer to
`get nodes`), and fail.json ({"verb": "stderr line"}: that verb exits 1 with that line, as kubectl
does on an API error). It models only what the backend calls; anything else exits 1."""

import json
import os
import sys
from pathlib import Path

import yaml

RUNNING = {"replicatedJobsStatus": [{"name": "trainer", "ready": 1, "active": 1, "succeeded": 0, "failed": 0}]}


def main(argv: list[str]) -> int:
    root = Path(os.environ["KUBECTL_STUB_DIR"])
    stdin = sys.stdin.read() if "-f" in argv and "-" in argv else None
    with open(root / "calls.jsonl", "a") as f:
        f.write(json.dumps({"argv": argv, "stdin": stdin}) + "\n")
    args = [a for a in argv if not a.startswith("--namespace=")]
    verb = args[0] if args else ""
    fail = json.loads((root / "fail.json").read_text()) if (root / "fail.json").exists() else {}
    if verb in fail:
        sys.stderr.write(fail[verb] + "\n")
        return 1
    jobsets = root / "jobsets"
    jobsets.mkdir(exist_ok=True)
    if verb == "cluster-info" or args[:2] == ["get", "crd"] or verb in ("cordon", "uncordon"):
        print(f"{verb} ok")
        return 0
    if args[:2] == ["get", "nodes"]:
        print((root / "nodes.json").read_text())
        return 0
    if verb == "apply":
        manifest = yaml.safe_load(stdin)
        name = manifest["metadata"]["name"]
        manifest["metadata"]["creationTimestamp"] = "2026-12-03T10:00:00Z"
        (jobsets / f"{name}.json").write_text(json.dumps({**manifest, "status": RUNNING}))
        print(f"jobset.jobset.x-k8s.io/{name} created")
        return 0
    if args[:2] == ["get", "jobset"]:
        path = jobsets / f"{args[2]}.json"
        if not path.exists():
            sys.stderr.write(f'Error from server (NotFound): jobsets.jobset.x-k8s.io "{args[2]}" not found\n')
            return 1
        print(path.read_text())
        return 0
    if args[:2] == ["delete", "jobset"]:
        (jobsets / f"{args[2]}.json").unlink(missing_ok=True)
        return 0
    if args[:2] == ["delete", "pods"]:
        return 0
    sys.stderr.write(f"kubectl stub: unknown call {argv}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
