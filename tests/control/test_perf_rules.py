"""The straggler rule's two actions, in-process: the supervisor reads the trainer's straggler events of
the current launch (events.jsonl, as train/trainer.py writes them) and alerts, or stops the launch and
relaunches it from the newest checkpoint. A recording backend stands in for processes."""

import json
import time

from wanka.control.db import open_db
from wanka.control.backend import Launched
from wanka.control.rules import Rules
from wanka.control.spec import parse_job_spec
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor


class RecordingBackend:
    """The supervisor's backend interface (wanka.control.backend.Backend), recording launches and stops."""

    name = "recording"

    def __init__(self):
        self.launches, self.stops = [], []

    def nodes(self):
        return None

    def launch(self, job, attempt, node, command):
        self.launches.append(attempt)
        return Launched(pid=1000 + attempt, pgid=1000 + attempt, proc_start=time.time())

    def alive(self, job):
        return True

    def started_at(self, job):
        return job["proc_start"]

    def exit_code(self, job):
        return None

    def describe(self, job):
        return f"recorded launch {job['attempt']}"

    def adopt(self, job):
        return None

    def stop(self, job, graceful_s=20.0):
        self.stops.append(job["attempt"])
        return "3 process(es)"

    def drain(self, node, reason):
        pass

    def undrain(self, node):
        pass


def running_job(tmp_path, rules: dict, events: int):
    store = Store(open_db(f"sqlite:///{tmp_path / 'state.db'}")[1])
    store.ensure_node("local", 2)
    backend = RecordingBackend()
    sup = Supervisor(store, Rules(**rules), backend=backend)
    ckpt = tmp_path / "job"
    job = store.submit(parse_job_spec({"layout": "dp=2", "steps": 10, "ckpt": str(ckpt)}), "alice")
    sup.tick()  # placed and launched (attempt 1)
    job = store.job(job["id"])
    ckpt.mkdir(exist_ok=True)
    with open(ckpt / "events.jsonl", "w") as f:
        f.write(json.dumps({"time": job["proc_start"] - 5, "event": "straggler", "step": 1, "ranks": [0],
                            "busy_s": [2.0, 0.1]}) + "\n")  # an older launch's: not counted
        for step in range(4, 4 + events):
            f.write(json.dumps({"time": job["proc_start"] + step, "event": "straggler", "step": step, "ranks": [1],
                                "busy_s": [0.1, 0.5]}) + "\n")
    return store, sup, backend, job


def test_straggler_alert_is_audited_once_per_launch(tmp_path):
    store, sup, backend, job = running_job(tmp_path, {"straggler": {"min_events": 3, "action": "alert"}}, events=3)
    sup.tick()
    sup.tick()
    [entry] = store.audit_log(job["id"])
    assert entry["rule"] == "straggler" and entry["decision"] == "alert"
    assert entry["detection"].startswith("3 straggler events in attempt 1 (>= 3): rank(s) [1], last at step 6")
    assert backend.stops == [] and backend.launches == [1]


def test_too_few_straggler_events_do_nothing(tmp_path):
    store, sup, backend, job = running_job(tmp_path, {"straggler": {"min_events": 3}}, events=2)
    sup.tick()
    assert store.audit_log(job["id"]) == [] and backend.stops == []


def test_straggler_restart_stops_the_launch_and_relaunches(tmp_path):
    store, sup, backend, job = running_job(tmp_path, {"straggler": {"min_events": 2, "action": "restart"}}, events=2)
    sup.tick()
    [entry] = store.audit_log(job["id"])
    assert entry["rule"] == "straggler" and entry["decision"] == "restart"
    assert "killed 3 process(es)" in entry["detection"] and entry["action"] == "launched attempt 2 from step 0 (no checkpoint yet)"
    assert backend.stops == [1] and backend.launches == [1, 2]
    assert store.job(job["id"])["restarts"] == 1
