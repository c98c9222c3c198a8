"""GPU probe: NVML queried in a child process with a hard deadline.

NVML calls can block forever on a wedged driver, so every probe runs in a fresh child process
that is killed at the deadline; a timeout counts as "unresponsive". No NVML library (a CPU host,
the tests, the local stack) means "no GPU", which is not a health failure. `fake:<file>` scripts
the probe from a file (one word: `responsive`, `idle`, `hung`, `error`, `none`), still through a
child process, so a hang exercises the real deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from tether_agent.protocol import GpuProbe

_NVML_SCRIPT = r"""
import json, sys
try:
    import pynvml
except ImportError:
    print(json.dumps({"available": False, "error": "nvidia-ml-py not installed"})); sys.exit(0)
try:
    pynvml.nvmlInit()
except pynvml.NVMLError_LibraryNotFound:
    print(json.dumps({"available": False, "error": "no NVML library"})); sys.exit(0)
except pynvml.NVMLError as exc:
    print(json.dumps({"available": True, "responsive": False, "error": str(exc)})); sys.exit(0)
try:
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        print(json.dumps({"available": False, "error": "no GPU"})); sys.exit(0)
    utils, used, total = [], 0.0, 0.0
    for i in range(count):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        utils.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        used += mem.used / 2**20
        total += mem.total / 2**20
    print(json.dumps({"available": True, "responsive": True, "utilization_pct": sum(utils) / count,
                      "memory_used_mb": used, "memory_total_mb": total}))
except pynvml.NVMLError as exc:
    print(json.dumps({"available": True, "responsive": False, "error": str(exc)}))
"""

_FAKE_SCRIPT = r"""
import json, sys, time
mode = (open(sys.argv[1]).read().strip() or "responsive").split()[0]
if mode == "hung":
    time.sleep(1e9)
if mode == "none":
    print(json.dumps({"available": False, "error": "fake: no GPU"}))
elif mode == "error":
    print(json.dumps({"available": True, "responsive": False, "error": "fake: GPU is lost"}))
else:
    util = 0.0 if mode == "idle" else 97.0
    print(json.dumps({"available": True, "responsive": True, "utilization_pct": util,
                      "memory_used_mb": 20000.0, "memory_total_mb": 24576.0}))
"""


_NO_NVML = frozenset({"no NVML library", "nvidia-ml-py not installed"})


@dataclass(frozen=True)
class Reading:
    """One probe's outcome, before the unresponsive streak is added."""

    available: bool
    responsive: bool = True
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    error: str | None = None


class Probe(Protocol):
    def probe(self) -> Reading: ...


class NoGpuProbe:
    def probe(self) -> Reading:
        return Reading(available=False, error="probe disabled")


class ChildProcessProbe:
    """Runs a probe script in a child interpreter and kills it at the deadline."""

    def __init__(self, script: str, args: list[str], timeout_s: float) -> None:
        self._argv = [sys.executable, "-I", "-c", script, *args]
        self._timeout_s = timeout_s
        self._gone = False  # NVML absent: stop spawning probes (idle CPU)

    def probe(self) -> Reading:
        if self._gone:
            return Reading(available=False, error="no NVML library")  # checked once: idle CPU
        try:
            done = subprocess.run(
                self._argv, capture_output=True, timeout=self._timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return Reading(
                available=True,
                responsive=False,
                error=f"probe did not answer within {self._timeout_s:g}s",
            )
        try:
            data = json.loads(done.stdout.decode().strip().splitlines()[-1])
            reading = Reading(**data)
        except (ValueError, IndexError, TypeError):
            tail = done.stderr.decode(errors="replace").strip()[-300:]
            return Reading(available=True, responsive=False, error=f"probe failed: {tail}")
        if not reading.available and reading.error in _NO_NVML:
            self._gone = True
        return reading


def make_probe(spec: str, timeout_s: float) -> Probe:
    """`nvml` | `none` | `fake:<file>` (TETHER_GPU_PROBE)."""
    if spec == "none":
        return NoGpuProbe()
    if spec.startswith("fake:"):
        return ChildProcessProbe(_FAKE_SCRIPT, [spec.removeprefix("fake:")], timeout_s)
    return ChildProcessProbe(_NVML_SCRIPT, [], timeout_s)


class GpuMonitor:
    """Probes every `interval_s` in its own thread and keeps the latest wire-ready state."""

    def __init__(self, probe: Probe, interval_s: float) -> None:
        self._probe = probe
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._state = GpuProbe(available=False, error="not probed yet")
        self._unresponsive_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def current(self) -> GpuProbe:
        with self._lock:
            return self._state

    def probe_once(self) -> GpuProbe:
        reading = self._probe.probe()
        now = time.monotonic()
        with self._lock:
            if reading.responsive:
                self._unresponsive_since = None
                unresponsive_s = 0.0
            else:
                if self._unresponsive_since is None:
                    self._unresponsive_since = now
                # The probe that failed started at least one deadline ago.
                unresponsive_s = now - self._unresponsive_since
            self._state = GpuProbe(
                available=reading.available,
                responsive=reading.responsive,
                utilization_pct=reading.utilization_pct,
                memory_used_mb=reading.memory_used_mb,
                memory_total_mb=reading.memory_total_mb,
                unresponsive_s=round(unresponsive_s, 3),
                error=reading.error[:1024] if reading.error else None,
            )
            return self._state

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.probe_once()
            self._stop.wait(self._interval_s)
