"""The node agent: samples this machine's health every period and hands it to a sink (the service's
`POST /v1/nodes/NAME/telemetry`, or the store directly when `wanka control up` runs it in-process).

    wanka control agent --node gpu-017 --url http://ctl:8470 --token $WANKA_TOKEN --period 10

Metrics (one name per series; per-GPU series carry the GPU index):
- psutil: `cpu_percent`, `mem_percent`, `disk_percent` (of /), `cpu_temp_C` (the hottest sensor that
  `psutil.sensors_temperatures()` reports; absent where the kernel exposes none, e.g. in containers).
- NVML (`nvidia-ml-py`, only when it imports and finds a GPU): `gpu{i}_temp_C`
  (nvmlDeviceGetTemperature, GPU die), `gpu{i}_power_W` (nvmlDeviceGetPowerUsage, mW -> W),
  `gpu{i}_util_percent`, `gpu{i}_ecc_corrected_total` / `gpu{i}_ecc_uncorrected_total` (volatile
  ECC counts since the driver loaded: nvmlDeviceGetTotalEccErrors; absent where ECC is off or
  unsupported), `gpu{i}_xid_total` (critical XID events this agent has seen, through an NVML event
  set registered for nvmlEventTypeXidCriticalError; absent where the driver refuses event sets).
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import psutil

Sample = dict[str, float]


class CpuSampler:
    def __init__(self) -> None:
        psutil.cpu_percent(None)  # the first call only starts the interval psutil measures over

    def sample(self) -> Sample:
        out = {"cpu_percent": psutil.cpu_percent(None), "mem_percent": psutil.virtual_memory().percent,
               "disk_percent": psutil.disk_usage("/").percent}
        temps = getattr(psutil, "sensors_temperatures", lambda: {})() or {}
        readings = [t.current for entries in temps.values() for t in entries if t.current is not None]
        if readings:
            out["cpu_temp_C"] = max(readings)
        return out


class NvmlSampler:
    """GPU health through NVML; `available` is False (and `sample` empty) without a driver or a GPU."""

    def __init__(self) -> None:
        self.available, self.handles, self._events, self.xids = False, [], None, []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no nvidia-ml-py, no driver, no device: a CPU-only node  # noqa: BLE001
            return
        self.available = bool(self.handles)
        self.xids = [0] * len(self.handles)
        try:
            self._events = pynvml.nvmlEventSetCreate()
            for h in self.handles:
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, self._events)
        except Exception:  # noqa: BLE001 - e.g. NVML_ERROR_NOT_SUPPORTED in some containers
            self._events = None

    def _read(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - a query this GPU or driver does not support
            return None

    def _drain_xids(self) -> None:
        nv = self.nv
        while True:
            try:
                data = nv.nvmlEventSetWait(self._events, 0)  # 0 ms: only what already happened
            except Exception:  # noqa: BLE001 - NVML_ERROR_TIMEOUT: no event pending
                return
            for i, h in enumerate(self.handles):
                if self._read(nv.nvmlDeviceGetIndex, data.device) == self._read(nv.nvmlDeviceGetIndex, h):
                    self.xids[i] += 1

    def sample(self) -> Sample:
        if not self.available:
            return {}
        nv, out = self.nv, {}
        if self._events is not None:
            self._drain_xids()
        for i, h in enumerate(self.handles):
            values = {
                "temp_C": self._read(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                "power_W": (lambda mw: None if mw is None else mw / 1000.0)(self._read(nv.nvmlDeviceGetPowerUsage, h)),
                "util_percent": (lambda u: None if u is None else u.gpu)(self._read(nv.nvmlDeviceGetUtilizationRates, h)),
                "ecc_corrected_total": self._read(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                                  nv.NVML_VOLATILE_ECC),
                "ecc_uncorrected_total": self._read(nv.nvmlDeviceGetTotalEccErrors, h,
                                                    nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
                "xid_total": self.xids[i] if self._events is not None else None,
            }
            out.update({f"gpu{i}_{k}": float(v) for k, v in values.items() if v is not None})
        return out


class HostSampler:
    """psutil and, where present, NVML: one dict of metric -> value per call."""

    def __init__(self) -> None:
        self.cpu, self.gpu = CpuSampler(), NvmlSampler()

    def sample(self) -> Sample:
        return {**self.cpu.sample(), **self.gpu.sample()}


class Agent:
    """Every `period_s`: `sink([{ts, metrics}])` with one fresh sample; a failing sink is reported by
    `on_error` and retried with the next sample (a restarting service loses the samples in between)."""

    def __init__(self, sink: Callable[[list[dict]], None], period_s: float, sampler=None,
                 on_error: Callable[[Exception], None] = lambda exc: None):
        self.sink, self.period_s, self.on_error = sink, period_s, on_error
        self.sampler = sampler or HostSampler()
        self.sent = 0

    def once(self) -> None:
        self.sink([{"ts": time.time(), "metrics": self.sampler.sample()}])
        self.sent += 1

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.once()
            except Exception as exc:  # noqa: BLE001 - the service may be restarting; keep sampling
                self.on_error(exc)
            stop.wait(self.period_s)


def http_sink(url: str, token: str, node: str) -> Callable[[list[dict]], None]:
    import httpx

    client = httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def post(samples: list[dict]) -> None:
        r = client.post(f"/v1/nodes/{node}/telemetry", json={"samples": samples})
        r.raise_for_status()

    return post
