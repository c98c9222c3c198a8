"""GPU probe: NVML queried in a child process with a hard deadline, never blocking the agent.

NVML calls (and `nvidia-smi`) can block forever on a wedged driver, so every probe runs in a fresh
child process that is killed at the deadline; a timeout counts as "unresponsive". A child stuck in
the driver may not even die of SIGKILL (uninterruptible sleep): after the kill it gets a bounded
wait (`REAP_S`), then it is abandoned, polled without blocking at each later probe, and no second
probe starts while it lives, so at most one probe child exists and the probe thread never blocks
for longer than the deadline plus `REAP_S`.

Utilisation: one fresh NVML sample per heartbeat interval (`nvmlDeviceGetUtilizationRates`, the
share of the driver's last sample window, 1/6 to 1 s, with a kernel running, averaged over the
GPUs), so each heartbeat carries a sample at most one interval plus one deadline old. A probe that
does not answer reports no utilisation (None), never a stale number. `unresponsive_s` counts from
the start of the first probe that did not answer and grows at every heartbeat while it lasts.

No NVML library (a CPU host, the tests, the local stack) means "no GPU", which is not a health
failure; NVML itself comes from the agent's `[gpu]` extra (`nvidia-ml-py`), which the onstart
script installs. `fake:<file>` scripts the probe from a file (one word: `responsive`, `idle`,
`hung`, `error`, `none`), still through a child process, so a hang exercises the real deadline;
the local stack's `hung-gpu-real-probe` demo instead runs this module's real NVML script against a
fake `pynvml` (`tether_local/hosts/fake_nvml`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from pydantic import ValidationError

from tether_agent.protocol import MAX_MB, MAX_SECONDS, GpuProbe

log = logging.getLogger(__name__)

REAP_S = 5.0  # after the kill, how long a probe child may take to exit before it is abandoned

_NVML_SCRIPT = r"""
import json, sys
def say(**reading):
    print(json.dumps(reading)); sys.exit(0)
try:
    import pynvml
except ImportError:
    say(available=False, error="nvidia-ml-py not installed")
except Exception as exc:  # a broken install is our problem, not the GPU's
    say(available=False, error=f"cannot import pynvml: {type(exc).__name__}: {exc}")
try:
    pynvml.nvmlInit()
except pynvml.NVMLError_LibraryNotFound:
    say(available=False, error="no NVML library")
except pynvml.NVMLError as exc:
    say(available=True, responsive=False, error=f"nvmlInit: {exc}")
try:
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        say(available=False, error="no GPU")
    utils, used, total = [], 0.0, 0.0
    for i in range(count):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        utils.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        used += mem.used / 2**20
        total += mem.total / 2**20
except pynvml.NVMLError as exc:
    say(available=True, responsive=False, error=str(exc))
except Exception as exc:  # not an NVML error: the probe's bug, never a hung verdict
    say(available=False, error=f"probe error: {type(exc).__name__}: {exc}")
say(available=True, responsive=True, utilization_pct=sum(utils) / count,
    memory_used_mb=used, memory_total_mb=total)
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


class Child(Protocol):
    """The part of `subprocess.Popen` a probe uses (tests pass a child that never dies)."""

    stdout: IO[bytes] | None
    stderr: IO[bytes] | None

    def communicate(
        self, input: bytes | None = None, timeout: float | None = None
    ) -> tuple[bytes, bytes]: ...

    def kill(self) -> None: ...

    def poll(self) -> int | None: ...


def _spawn(argv: Sequence[str]) -> Child:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


class ChildProcessProbe:
    """Runs a probe script in a child interpreter (`python -I`: no PYTHONPATH, no user site),
    kills it at the deadline and never waits for it without a bound (module docstring)."""

    def __init__(
        self,
        script: str,
        args: Sequence[str],
        timeout_s: float,
        *,
        python: str | None = None,
        reap_s: float = REAP_S,
        spawn: Callable[[Sequence[str]], Child] = _spawn,
    ) -> None:
        self._argv = [python or sys.executable, "-I", "-c", script, *args]
        self._timeout_s = timeout_s
        self._reap_s = reap_s
        self._spawn = spawn
        self._gone = False  # NVML absent: stop spawning probes (idle CPU)
        self._stuck: Child | None = None  # killed, not exited: no new probe while it lives
        self._stuck_since = 0.0
        self.abandoned = 0  # probe children that outlived their kill

    def probe(self) -> Reading:
        if self._gone:
            return Reading(available=False, error="no NVML library")  # checked once: idle CPU
        if self._stuck is not None:
            if self._stuck.poll() is None:
                return Reading(
                    available=True,
                    responsive=False,
                    error=f"a probe killed {time.monotonic() - self._stuck_since:.0f}s ago has "
                    "not exited (stuck in the driver): no new probe until it does",
                )
            log.warning("the stuck GPU probe has exited at last: probing again")
            self._stuck = None
        try:
            child = self._spawn(self._argv)
        except OSError as exc:
            return Reading(available=True, responsive=False, error=f"cannot start a probe: {exc}")
        try:
            out, err = child.communicate(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            self._kill(child)
            return Reading(
                available=True,
                responsive=False,
                error=f"probe did not answer within {self._timeout_s:g}s",
            )
        try:
            data = json.loads(out.decode().strip().splitlines()[-1])
            reading = Reading(**data)
        except (ValueError, IndexError, TypeError):
            tail = err.decode(errors="replace").strip()[-300:]
            return Reading(available=True, responsive=False, error=f"probe failed: {tail}")
        if not reading.available and reading.error in _NO_NVML:
            self._gone = True
        return reading

    def _kill(self, child: Child) -> None:
        """SIGKILL, then wait at most `reap_s`; a child that is still there is abandoned."""
        with contextlib.suppress(OSError):
            child.kill()
        try:
            child.communicate(timeout=self._reap_s)  # reaps it (and drains its pipes)
            return
        except subprocess.TimeoutExpired:
            pass
        self._stuck = child
        self._stuck_since = time.monotonic()
        self.abandoned += 1
        for pipe in (child.stdout, child.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        log.error(
            "GPU probe child did not exit %.0fs after SIGKILL (stuck in the driver): abandoned; "
            "no new probe until it exits",
            self._reap_s,
        )


def make_probe(spec: str, timeout_s: float) -> Probe:
    """`nvml` | `none` | `fake:<file>` (TETHER_GPU_PROBE)."""
    if spec == "none":
        return NoGpuProbe()
    if spec.startswith("fake:"):
        return ChildProcessProbe(_FAKE_SCRIPT, [spec.removeprefix("fake:")], timeout_s)
    return ChildProcessProbe(_NVML_SCRIPT, [], timeout_s)


def nvml_probe(timeout_s: float, *, python: str | None = None) -> ChildProcessProbe:
    """The real NVML probe, optionally run by another interpreter (whose `pynvml` it imports)."""
    return ChildProcessProbe(_NVML_SCRIPT, [], timeout_s, python=python)


def _bounded(value: object, high: float) -> float | None:
    """A number the wire accepts: None when not a finite number, else clamped into [0, high]."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return min(max(number, 0.0), high) if math.isfinite(number) else None


def _wire(reading: Reading) -> GpuProbe:
    """The reading as the heartbeat carries it; whatever a probe returned, this cannot fail."""
    try:
        return GpuProbe(
            available=bool(reading.available),
            responsive=bool(reading.responsive),
            utilization_pct=_bounded(reading.utilization_pct, 100.0)
            if reading.responsive
            else None,
            memory_used_mb=_bounded(reading.memory_used_mb, MAX_MB),
            memory_total_mb=_bounded(reading.memory_total_mb, MAX_MB),
            error=str(reading.error)[:1024] if reading.error else None,
        )
    except ValidationError as exc:
        return GpuProbe(
            available=False, error=f"unreadable probe reading: {exc.errors()[:1]}"[:1024]
        )


class GpuMonitor:
    """Probes every `interval_s` (fixed rate) in its own thread and keeps the latest wire-ready
    state; `current()` adds the unresponsive streak as of now."""

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
            state, since = self._state, self._unresponsive_since
        if since is None:
            return state
        streak = min(time.monotonic() - since, MAX_SECONDS)
        return state.model_copy(update={"unresponsive_s": round(streak, 3)})

    def probe_once(self) -> GpuProbe:
        started = time.monotonic()
        try:
            reading = self._probe.probe()
        except Exception as exc:  # a bug in the probe must never stop probing or the heartbeat
            log.exception("GPU probe failed")
            reading = Reading(available=False, error=f"probe error: {type(exc).__name__}: {exc}")
        with self._lock:
            if reading.responsive:
                self._unresponsive_since = None
            elif self._unresponsive_since is None:
                self._unresponsive_since = started  # the probe that did not answer began here
            self._state = _wire(reading)
        return self.current()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.probe_once()
            # One sample per interval; after a slow probe (a deadline), half an interval of rest.
            next_at = max(next_at + self._interval_s, time.monotonic() + self._interval_s / 2)
            self._stop.wait(next_at - time.monotonic())
