"""Node telemetry in-process: the agent's samples land in the DB and in /metrics, bad samples are 4xx
naming the field, retention prunes, and the reliability predictor scores a scripted failing series
above the node_risk threshold and healthy / CPU-only series below it."""

import time

import pytest
from fastapi.testclient import TestClient

from wanka.control.agent import Agent, CpuSampler, HostSampler, NvmlSampler
from wanka.control.api import create_app
from wanka.control.db import open_db
from wanka.control.risk import NodeScorer, TelemetryPredictor
from wanka.control.rules import load_rules
from wanka.control.store import Store
from wanka.control.supervisor import Supervisor
from wanka.control.telemetry_store import TelemetryStore, check_samples

H = 3600.0


@pytest.fixture(scope="module")
def predictor():
    return TelemetryPredictor()  # trained once: a few seconds


@pytest.fixture
def api(db_url):
    store = Store(open_db(db_url)[1])
    for name in ("local", "n1", "n2"):
        store.ensure_node(name, 2)
    tokens = {name: store.add_token(name, role) for name, role in (("root", "admin"), ("alice", "user"))}
    client = TestClient(create_app(store, Supervisor(store, load_rules())))
    return client, {k: {"Authorization": f"Bearer {v}"} for k, v in tokens.items()}, store


def gpu_series(now, hours=7.0, every_s=600.0, temp=lambda age_h: 60.0, ecc_per_h=0.0, xid_per_h=0.0, gpus=2):
    """Scripted agent samples for a GPU node over the last `hours`, oldest first."""
    out = []
    for k in range(int(hours * H / every_s) + 1):
        ts = now - hours * H + k * every_s
        age_h = (now - ts) / H  # 0 = now
        m = {}
        for g in range(gpus):
            m |= {f"gpu{g}_temp_C": temp(age_h) if g == 0 else 60.0, f"gpu{g}_power_W": 600.0,
                  f"gpu{g}_ecc_corrected_total": (ecc_per_h * (hours - age_h)) if g == 0 else 0.0,
                  f"gpu{g}_xid_total": float(int(xid_per_h * (hours - age_h))) if g == 0 else 0.0}
        out.append({"ts": ts, "metrics": m})
    return out


def test_agent_samples_land_in_the_db_and_in_metrics(api):
    client, auth, store = api

    def post(samples):
        r = client.post("/v1/nodes/local/telemetry", json={"samples": samples}, headers=auth["root"])
        assert r.status_code == 201, r.text

    agent = Agent(post, period_s=1.0)
    agent.once()
    agent.once()
    series = client.get("/v1/nodes/local/telemetry", headers=auth["alice"]).json()["series"]
    assert {"cpu_percent", "mem_percent", "disk_percent"} <= set(series)
    assert all(len(points) == 2 for points in series.values())
    assert 0.0 <= series["mem_percent"][-1][1] <= 100.0
    assert TelemetryStore(store.sessions).count("local") == 2 * len(series)
    text = client.get("/metrics").text
    assert f'wanka_node_telemetry{{metric="mem_percent",node="local"}} {series["mem_percent"][-1][1]}' in text


def test_the_host_sampler_has_gpu_fields_exactly_when_nvml_finds_a_gpu():
    nvml = NvmlSampler()
    keys = set(HostSampler().sample())
    assert set(CpuSampler().sample()) <= keys
    gpu_keys = {k for k in keys if k.startswith("gpu")}
    if nvml.available:  # a GPU node: temperature and power of every GPU at least
        assert {f"gpu{i}_temp_C" for i in range(len(nvml.handles))} <= gpu_keys
    else:  # no nvidia-ml-py, driver or GPU: CPU-only fields, no error
        assert gpu_keys == set() and nvml.sample() == {}


@pytest.mark.parametrize("samples, field", [
    ([], "samples"),
    ([{"metrics": {"Temp C": 1.0}}], "samples.0.metrics"),
    ([{"metrics": {"temp_c": "hot"}}], "samples.0.metrics.temp_c"),
    ([{"ts": time.time() + 10 * H, "metrics": {"temp_c": 1.0}}], "samples.0.ts"),
    ([{"metrics": {}}], "samples.0.metrics"),
    ([{"metrics": {"a": 1.0}, "when": 3}], "samples.0"),
])
def test_bad_samples_are_4xx_naming_the_field_and_write_nothing(api, samples, field):
    client, auth, store = api
    r = client.post("/v1/nodes/local/telemetry", json={"samples": samples}, headers=auth["root"])
    assert r.status_code == 422 and r.json()["field"] == field, r.json()
    assert TelemetryStore(store.sessions).count() == 0


def test_telemetry_needs_an_admin_and_a_known_node(api):
    client, auth, store = api
    body = {"samples": [{"metrics": {"cpu_percent": 5.0}}]}
    assert client.post("/v1/nodes/local/telemetry", json=body, headers=auth["alice"]).status_code == 403
    assert client.post("/v1/nodes/nosuch/telemetry", json=body, headers=auth["root"]).json()["field"] == "node"
    assert client.post("/v1/nodes/local/telemetry", json={"rows": []}, headers=auth["root"]).json()["field"] == "samples"
    assert TelemetryStore(store.sessions).count() == 0


def test_retention_prunes_old_samples(api):
    _, _, store = api
    tel = TelemetryStore(store.sessions)
    now = time.time()
    tel.add("local", check_samples([{"ts": now - 50 * H, "metrics": {"cpu_percent": 1.0}},
                                    {"ts": now - 1, "metrics": {"cpu_percent": 2.0}}], now))
    assert tel.prune(48 * H, now) == 1
    assert tel.series("local", 0.0) == {"cpu_percent": [(now - 1, 2.0)]}


def test_the_predictor_scores_a_failing_series_above_the_threshold(api, predictor):
    """A GPU warming 14 C over 6 h with growing ECC and XID counts (the precursors telemetry.py
    simulates) scores above node_risk's 0.5; a steady GPU node and a hot CPU-only node score below."""
    client, auth, store = api
    tel = TelemetryStore(store.sessions)
    now = time.time()
    failing = gpu_series(now, temp=lambda age_h: 74.0 - 14.0 * min(age_h, 6.0) / 6.0, ecc_per_h=10.0, xid_per_h=0.5)
    tel.add("n1", check_samples(failing, now))
    tel.add("n2", check_samples(gpu_series(now), now))
    tel.add("local", check_samples([{"ts": now - k * 60, "metrics": {"cpu_temp_C": 95.0, "cpu_percent": 100.0}}
                                    for k in range(10)], now))
    threshold = load_rules().node_risk.threshold
    risks = NodeScorer(store, tel, every_s=1.0, retention_s=48 * H, predictor=predictor).score_once(now)
    assert risks["n1"] > threshold > risks["n2"] and risks["local"] < threshold, risks
    nodes = {n["name"]: n for n in store.nodes()}
    assert nodes["n1"]["predicted_risk"] == risks["n1"] and nodes["n1"]["risk"] is None
    detail = dict(kv.split("=") for kv in nodes["n1"]["risk_detail"].split(", "))
    # the newest hour's mean (72.8 C: the ramp's last hour) against 60 C six hours before and the 60 C baseline
    assert float(detail["temp_trend_C"]) == pytest.approx(74.0 - 14.0 * 0.5 / 6 - 60.0, abs=0.05) == float(detail["temp_excess_C"])
    assert float(detail["ecc_6h"]) == 60.0 and float(detail["ecc_24h"]) == 70.0 and float(detail["xid_6h"]) == 3.0
    assert nodes["local"]["risk_detail"] == "all features 0"  # a CPU's temperature is no GPU signal
    text = client.get("/metrics").text  # the rule's risk is the larger of reported and predicted
    assert f'wanka_control_node_risk{{node="n1"}} {risks["n1"]}' in text
    # undrain: a repaired node's history starts anew, so the old precursors no longer count
    assert client.post("/v1/nodes/n1/undrain", headers=auth["root"]).json()["predicted_risk"] is None
    again = NodeScorer(store, tel, every_s=1.0, retention_s=48 * H, predictor=predictor).score_once(time.time())
    assert "n1" not in again and store.nodes()[1]["predicted_risk"] is None


class FakeNvml:
    """The NVML calls the agent makes, for two GPUs: GPU 1 has ECC off (its query raises), and one
    critical XID event is pending for GPU 0 - what a driver reports, without a driver."""

    NVML_TEMPERATURE_GPU, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 0, 1
    NVML_VOLATILE_ECC, nvmlEventTypeXidCriticalError = 0, 8

    class Event:
        def __init__(self, device):
            self.device = device

    def __init__(self):
        self.pending = [self.Event("dev0")]

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"dev{i}"

    def nvmlDeviceGetIndex(self, handle):
        return int(handle[3:])

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlDeviceRegisterEvents(self, handle, kinds, event_set):
        assert kinds == self.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait(self, event_set, timeout_ms):
        if not self.pending:
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        return self.pending.pop()

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 61 + self.nvmlDeviceGetIndex(handle)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 612_500  # mW

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Util", (), {"gpu": 97})()

    def nvmlDeviceGetTotalEccErrors(self, handle, kind, counter):
        if handle == "dev1":
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 5 if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED else 0


def test_the_nvml_sampler_reads_every_gpu_and_counts_xid_events(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", FakeNvml())
    nvml = NvmlSampler()
    assert nvml.available
    first = nvml.sample()
    assert first == {"gpu0_temp_C": 61.0, "gpu0_power_W": 612.5, "gpu0_util_percent": 97.0,
                     "gpu0_ecc_corrected_total": 5.0, "gpu0_ecc_uncorrected_total": 0.0, "gpu0_xid_total": 1.0,
                     "gpu1_temp_C": 62.0, "gpu1_power_W": 612.5, "gpu1_util_percent": 97.0, "gpu1_xid_total": 0.0}
    assert nvml.sample()["gpu0_xid_total"] == 1.0  # counted once: no new event
    assert check_samples([{"metrics": first}], time.time())  # every name and value is one the service accepts


def test_bad_up_and_agent_flags_exit_2_naming_the_field(run_cli, tmp_path):
    state = tmp_path / "state"
    for flags, field in ((["--cluster", "no-such-cluster"], "cluster"), (["--telemetry-retention-h", "1"],
                         "telemetry-retention-h"), (["--agent-period", "-1"], "agent-period")):
        code, out, err = run_cli("control", "up", "--state-dir", str(state), *flags)
        assert code == 2 and len(err.strip().splitlines()) == 1 and field in err, (flags, err)
    assert not state.exists()  # nothing half-written
    code, _, err = run_cli("control", "agent", "--node", "local", "--count", "0", "--url", "http://127.0.0.1:9")
    assert code == 2 and "count: expected an integer >= 1" in err
