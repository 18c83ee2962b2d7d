"""The supervisor: places queued jobs with `wanka.sched.Scheduler`, launches them through a backend,
watches them, and runs the detect -> decide -> act rules, writing each action to the audit log.

Crash safety (docs/control.md "Crash safety"): every state change is committed before it is acted
on. A launch is first committed as `launching` with its attempt number, then started, then
committed as `running` with pid, pgid and the pid's start time. After a restart of the service,
`recover()` re-adopts each `running` job whose leader still runs (same pid and start time), finds a
`launching` job's processes by their environment tag (local_backend.py) and adopts them, or launches
the attempt only when no process of it exists - so nothing is launched twice.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from wanka.cluster.model import Cluster
from wanka.cluster.spec import parse_cluster_spec
from wanka.control.backend import Backend, BackendError, log_path
from wanka.control.rules import Rules
from wanka.control.spec import train_command
from wanka.control.store import Store
from wanka.control.watch import last_error, newest_checkpoint_step, progress, recent_tokens_per_s, spike_events, straggler_events
from wanka.sched import Job, Scheduler, Start


def inventory_cluster(nodes: list[dict]) -> Cluster:
    """The node inventory as a Cluster for the scheduler: one node per row, `slots` ranks each
    (GPUs on a GPU node; worker processes on the CPU-only local node). The GPU type only feeds the
    scheduler's speed model, which the control plane does not use."""
    slots = nodes[0]["slots"]
    spec = parse_cluster_spec({"name": "control-inventory", "gpu": "h100-sxm", "gpus": slots * len(nodes),
                               "gpus_per_node": slots, "scale_up": {"domain": slots}})
    return Cluster(spec)


def node_risk(node: dict) -> float:
    """The risk the node_risk rule acts on: the larger of the reported and the telemetry predictor's."""
    return max(node["risk"] or 0.0, node["predicted_risk"] or 0.0)


class Supervisor:
    def __init__(self, store: Store, rules: Rules, backend: Backend | None = None, cluster_source: str | None = None):
        from wanka.control.local_backend import LocalBackend

        self.store, self.rules = store, rules
        self.cluster_source = cluster_source  # the node's hardware as a cluster spec, for throughput predictions
        self.backend = backend or LocalBackend()
        nodes = store.nodes()
        self.node_names = [n["name"] for n in nodes]
        self.cluster = inventory_cluster(nodes)
        self.sched = Scheduler(self.cluster, queue="priority", backfill=False, preemption=False, borrowing=False)
        self.counters = {"rank_exits": 0, "hangs": 0, "launches": 0, "adopted": 0, "loss_spikes": 0, "stragglers": 0,
                         "throughput_alerts": 0}
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.cluster.gpus

    def predict_tokens_per_s(self, spec) -> float | None:
        from wanka.control.throughput import predict_tokens_per_s

        return predict_tokens_per_s(self.cluster_source, spec) if self.cluster_source else None

    # ---- start-up ----------------------------------------------------------------------------
    def recover(self) -> list[dict]:
        """Rebuild the scheduler from the DB and re-adopt live launches (see the module docstring)."""
        now = time.time()
        adopted = []
        active = self.store.active_jobs()
        placed = [j for j in active if j["state"] in ("launching", "running")]
        for job in placed:  # re-placed first, in submission order, so they get their slots back
            self._submit(job)
        self.sched.schedule(now)
        self._sync_nodes()  # after: a drain keeps running jobs, but would leave them queued in the scheduler
        for job in placed:
            if job["state"] == "running" and self.backend.alive(job):
                how = f"{self.backend.describe(job)} still runs"
            elif job["state"] == "launching" and (found := self.backend.adopt(job)):
                job = self.store.update_job(job["id"], state="running", pid=found.pid, pgid=found.pgid,
                                            proc_start=found.proc_start, backend_id=found.backend_id)
                how = f"{self.backend.describe(job)} of the uncommitted attempt {job['attempt']} found"
            elif job["state"] == "launching":
                self.store.audit(rule="recovery", detection="launch committed but no process of it exists",
                                 decision="launch", action=f"launch attempt {job['attempt']}", reason="service restarted",
                                 detected_at=now, job_id=job["id"])
                self._start(self.store.job(job["id"]), job["attempt"], job["node"])
                continue
            else:
                continue  # its leader exited while the service was down: the next tick reads its exit code
            self.counters["adopted"] += 1
            adopted.append(self.store.audit(rule="recovery", detection=how, decision="adopt",
                                            action=f"watch attempt {job['attempt']} again", reason="service restarted",
                                            detected_at=now, job_id=job["id"]))
        for job in active:
            if job["state"] == "queued":
                self._submit(job)
        return adopted

    # ---- one pass ----------------------------------------------------------------------------
    def tick(self) -> None:
        with self._lock:
            now = time.time()
            self._sync_nodes()
            for job in self.store.active_jobs():
                if job["id"] not in self._known():
                    self._submit(job)
                if job["cancel_requested"]:
                    self._cancel(job, now)
                elif job["state"] == "running":
                    self._watch(job, now)
            for d in self.sched.schedule(now):
                if isinstance(d, Start):
                    node = self.node_names[d.gpu_ids[0] // self.cluster.gpus_per_node]
                    job = self.store.job(int(d.job_id))
                    self._start(job, job["attempt"] + 1, node)

    def _known(self) -> set[int]:
        return {int(k) for k in self.sched.jobs}

    def _submit(self, job: dict) -> None:
        self.sched.submit(Job(str(job["id"]), gpus=job["nproc"], submit_s=job["created_at"], priority=job["priority"],
                              tenant=job["owner"], preemptible=False), time.time())

    def _sync_nodes(self) -> None:
        for i, node in enumerate(self.store.nodes()):
            if node["state"] == "up" and node_risk(node) > self.rules.node_risk.threshold:
                self._drain_and_migrate(i, node)
                node = {**node, "state": "drained"}
            drained = node["state"] == "drained"
            if drained and i not in self.sched.drained:
                self.sched.drain_nodes([i], time.time())
                self._tell_backend(self.backend.drain, node["name"], "wanka control: drained"
                                   + (f" (risk {node['risk']:.3f})" if node["risk"] is not None else ""))
            elif not drained and i in self.sched.drained:
                self.sched.repair_nodes([i], time.time())
                self._tell_backend(self.backend.undrain, node["name"])

    def _tell_backend(self, call, node: str, *args) -> None:
        """Mirror a drain/undrain into the backend (slurm: scontrol); a refusal is one audit line."""
        try:
            call(node, *args)
        except BackendError as exc:
            self.store.audit(rule="backend", detection=str(exc), decision="continue", action="node state kept in wanka only",
                             reason=f"the {self.backend.name} backend refused it", detected_at=time.time(), node=node)

    # ---- actions -----------------------------------------------------------------------------
    def _start(self, job: dict, attempt: int, node: str | None) -> None:
        self.store.update_job(job["id"], state="launching", attempt=attempt, node=node, backend=self.backend.name,
                              backend_id=None, started_at=job["started_at"] or time.time())
        try:
            launched = self.backend.launch(job, attempt, node, train_command(job, job["lr_scale"]))
        except (OSError, BackendError) as exc:  # the checkpoint directory cannot be created, sbatch refused it
            now = time.time()
            self._end(job, "failed", now, error=f"launch failed: {exc}")
            self.store.audit(rule="launch", detection=f"launch of attempt {attempt} raised {exc}", decision="fail",
                             action="marked the job failed", reason="the backend could not start it", detected_at=now,
                             job_id=job["id"], node=node)
            return
        self.counters["launches"] += 1
        self.store.update_job(job["id"], state="running", pid=launched.pid, pgid=launched.pgid,
                              proc_start=launched.proc_start, backend_id=launched.backend_id)

    def _end(self, job: dict, state: str, now: float, **fields) -> None:
        self.store.update_job(job["id"], state=state, ended_at=now, **fields)
        self.sched.withdraw(str(job["id"]), now)

    def _cancel(self, job: dict, now: float) -> None:
        what = self.backend.stop(job) if job["state"] in ("launching", "running") else "nothing"
        self._end(job, "cancelled", now)
        self.store.audit(rule="cancel", detection="cancel requested by the API", decision="cancel",
                         action=f"stopped {what} of attempt {job['attempt']}", reason="user request",
                         detected_at=now, job_id=job["id"])

    def _watch(self, job: dict, now: float) -> None:
        if self.backend.alive(job):
            started = self.backend.started_at(job)
            if started is not None and not self._check_hang(job, now, started):  # None: queued in the backend
                self._check_spikes(job, now)
                job = self.store.job(job["id"])
                if job["state"] == "running":
                    self._check_stragglers(job, now)
                    self._check_throughput(job, now)
            return
        code = self.backend.exit_code(job)
        result_file = Path(job["ckpt"]) / "result.json"
        if code == 0 and result_file.is_file():
            self._end(job, "succeeded", now, result=json.loads(result_file.read_text()))
            return
        self.counters["rank_exits"] += 1
        why = last_error(log_path(job["ckpt"], job["attempt"]))
        detection = (f"attempt {job['attempt']} exited with code {code}: {why}" if code is not None
                     else f"attempt {job['attempt']} ({self.backend.describe(job)}) is gone without an exit code")
        self._recover_or_fail(job, now, "dead_rank", detection, self.rules.dead_rank.action == "restart")

    def _check_hang(self, job: dict, now: float, launched_at: float) -> bool:
        rule = self.rules.hang
        p = progress(job["ckpt"])
        if p.last_step_at is None or p.last_step_at < launched_at:  # no step in this launch yet
            idle, limit, what = now - launched_at, rule.startup_grace_s, "no step since launch"
        else:
            idle = now - p.last_step_at
            limit = max(rule.min_s, rule.factor * (p.median_step_s or 0.0))
            what = f"no step after step {p.last_step} (median step {p.median_step_s or 0.0:.3f} s)"
        if idle <= limit:
            return False
        self.counters["hangs"] += 1
        detection = f"{what} for {idle:.1f} s > {limit:.1f} s"
        if rule.action == "alert":
            return False
        stopped = self.backend.stop(job, graceful_s=0)
        self._recover_or_fail(job, now, "hang", detection + f"; killed {stopped}", True)
        return True

    def _check_spikes(self, job: dict, now: float) -> None:
        """Audit each rollback the trainer made; after max_rollbacks in one launch, relaunch with a lower LR."""
        events = spike_events(job["ckpt"])
        for e in events[job["spikes_seen"]:]:
            self.counters["loss_spikes"] += 1
            self.store.audit(rule="loss_spike", detection=f"{e.get('reason')} at batch {e.get('batch')}",
                             decision="rollback", action=f"trainer restored step {e.get('rolled_back_to')}, skips batches "
                             f"{e.get('skipped_batches')}, trainer lr_scale {e.get('lr_scale')}",
                             reason="the trainer's in-process rollback (docs/train.md)", detected_at=e.get("time", now),
                             job_id=job["id"], node=job["node"])
        if len(events) > job["spikes_seen"]:
            self.store.update_job(job["id"], spikes_seen=len(events))
        rule = self.rules.loss_spike
        in_launch = [e for e in events if e.get("time", 0) >= (job["proc_start"] or now)]
        if len(in_launch) < rule.max_rollbacks:
            return
        stopped = self.backend.stop(job, graceful_s=0)
        lr_scale = job["lr_scale"] * rule.lr_factor
        self.store.update_job(job["id"], lr_scale=lr_scale)
        detection = (f"{len(in_launch)} loss-spike rollbacks in attempt {job['attempt']} (>= {rule.max_rollbacks}); "
                     f"killed {stopped}")
        self._recover_or_fail(self.store.job(job["id"]), now, "loss_spike", detection, True,
                              note=f" with lr x{lr_scale:g}")

    def _check_stragglers(self, job: dict, now: float) -> None:
        """The trainer's straggler events of this launch; at min_events: audit, and restart if told to."""
        rule = self.rules.straggler
        if job["straggler_alerted_attempt"] == job["attempt"]:
            return
        events = [e for e in straggler_events(job["ckpt"]) if e.get("time", 0) >= (job["proc_start"] or now)]
        if len(events) < rule.min_events:
            return
        self.counters["stragglers"] += 1
        self.store.update_job(job["id"], straggler_alerted_attempt=job["attempt"])
        ranks = sorted({r for e in events for r in e.get("ranks", [])})
        last = events[-1]
        detection = (f"{len(events)} straggler events in attempt {job['attempt']} (>= {rule.min_events}): rank(s) "
                     f"{ranks}, last at step {last.get('step')} busy_s {[round(b, 3) for b in last.get('busy_s', [])]}")
        if rule.action == "alert":
            self.store.audit(rule="straggler", detection=detection, decision="alert", action="none (alert only)",
                             reason="straggler rule, action alert", detected_at=last.get("time", now),
                             job_id=job["id"], node=job["node"])
            return
        stopped = self.backend.stop(job, graceful_s=0)
        self._recover_or_fail(job, now, "straggler", detection + f"; killed {stopped}", True)

    def _check_throughput(self, job: dict, now: float) -> None:
        """Measured tokens/s (median of the last min_steps steps) against the planner's prediction."""
        rule = self.rules.throughput
        predicted = job["predicted_tokens_per_s"]
        if predicted is None or job["throughput_alerted_attempt"] == job["attempt"]:
            return
        p = progress(job["ckpt"])
        measured = recent_tokens_per_s(job["ckpt"], rule.min_steps)
        if measured is None or p.last_step_at is None or p.last_step_at < (job["proc_start"] or now):
            return
        floor = (1 - rule.below_pct / 100) * predicted
        if measured[0] >= floor:
            return
        self.counters["throughput_alerts"] += 1
        self.store.update_job(job["id"], throughput_alerted_attempt=job["attempt"])
        self.store.audit(rule="throughput", detection=f"measured {measured[0]:.4g} tokens/s (median of the last "
                         f"{measured[1]} steps) < {floor:.4g} = (1 - {rule.below_pct:g}%) x predicted {predicted:.4g}",
                         decision="alert", action="none (alert only)", reason="throughput rule, action alert",
                         detected_at=now, job_id=job["id"], node=job["node"])

    def _drain_and_migrate(self, index: int, node: dict) -> None:
        """Drain a risky node; each job there stops and queues again, to restart from its newest checkpoint."""
        now = time.time()
        self.store.set_node(node["name"], state="drained")
        moved = []
        for job in self.store.active_jobs():
            if job["node"] == node["name"] and job["state"] in ("launching", "running"):
                self.backend.stop(job, graceful_s=0)
                self.store.update_job(job["id"], state="queued", restarts=job["restarts"] + 1, pid=None, pgid=None,
                                      proc_start=None, backend_id=None)
                moved.append(job["id"])
        self.sched.fail_nodes([index], now)  # the scheduler requeues its jobs in their original place
        self.sched.drain_nodes([index], now)
        spare = any(n["state"] == "up" for n in self.store.nodes())
        where = ("it restarts from its newest checkpoint on another node" if spare
                 else "no other node is up: it waits for one, then restarts from its newest checkpoint")
        for job_id in moved or [None]:
            predicted = (node["predicted_risk"] or 0.0) > (node["risk"] or 0.0)
            source = f" (telemetry predictor: {node['risk_detail']})" if predicted else ""
            self.store.audit(rule="node_risk", detection=f"node {node['name']} risk {node_risk(node):.3f} > "
                             f"{self.rules.node_risk.threshold}{source}", decision="drain_migrate",
                             action=f"drained {node['name']}" + (f"; stopped and requeued job {job_id} ({where})" if job_id else ""),
                             reason="node_risk rule", detected_at=now, job_id=job_id, node=node["name"])
        self._tell_backend(self.backend.drain, node["name"], f"wanka control: drained (risk {node_risk(node):.3f})")

    def _recover_or_fail(self, job: dict, now: float, rule: str, detection: str, restart: bool, note: str = "") -> None:
        limit = self.rules.dead_rank.max_restarts
        if restart and job["restarts"] < limit:
            step = newest_checkpoint_step(job["ckpt"])
            self.store.update_job(job["id"], restarts=job["restarts"] + 1)
            fresh = self.store.job(job["id"])
            self._start(fresh, job["attempt"] + 1, job["node"])
            self.store.audit(rule=rule, detection=detection, decision="restart",
                             action=f"launched attempt {job['attempt'] + 1} from "
                                    + (f"checkpoint step {step}" if step is not None else "step 0 (no checkpoint yet)") + note,
                             reason=f"restart {job['restarts'] + 1} of at most {limit}", detected_at=now,
                             job_id=job["id"], node=job["node"])
            return
        reason = f"{job['restarts']} restarts used of {limit}" if restart else f"rule {rule} says fail"
        self._end(job, "failed", now, error=detection)
        self.store.audit(rule=rule, detection=detection, decision="fail", action="marked the job failed",
                         reason=reason, detected_at=now, job_id=job["id"], node=job["node"])

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, stop: threading.Event, poll_s: float = 0.5) -> None:
        import sys
        import traceback

        while not stop.is_set():
            try:
                self.tick()
            except BackendError as exc:  # Slurm did not answer or refused: one line, the next pass retries
                sys.stderr.write(f"wanka control: {self.backend.name}: {exc}; retrying on the next pass\n")
            except Exception:  # a bug or a lost DB connection must not end supervision; say it and go on
                sys.stderr.write("wanka control: supervisor tick failed:\n" + traceback.format_exc())
            stop.wait(poll_s)
