"""A fake `pynvml` (the module of `nvidia-ml-py`) for the agent's real NVML probe.

Installed as a top-level `pynvml` (copied into a venv's site-packages), it stands where the real
binding would: the agent's probe script (`tether_agent.gpu`) imports it, calls what it calls on a
real host (`nvmlInit`, `nvmlDeviceGetCount`, `nvmlDeviceGetHandleByIndex`,
`nvmlDeviceGetUtilizationRates`, `nvmlDeviceGetMemoryInfo`) and catches the same exception
classes (`NVMLError` and its `NVMLError_<Name>` subclasses, named as the real module names them).
Standard library only.

One GPU of 24 GiB, scripted by the first word of the file named by `$FAKE_NVML_FILE`, read at
every call so a test or a demo can change it while the agent runs (no file: `responsive`):

- `responsive`: answers, 97 % utilisation, 20,000 MiB used (the fake probe's numbers);
- `idle`: answers, 0 % utilisation;
- `hung`: a wedged driver: every device query blocks (forever; the probe's deadline kills it);
- `lost` (or `error`): device queries raise `NVMLError_GpuIsLost`;
- `timeout`: device queries raise `NVMLError_Timeout`;
- `none`: no NVML library (a CPU host): `nvmlInit` raises `NVMLError_LibraryNotFound`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_UNKNOWN = 999

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
_MIB = 2**20


class NVMLError(Exception):
    value = NVML_ERROR_UNKNOWN

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML error {self.value}")


# Named as the real module names them (it generates them from its NVML_ERROR_* codes).
class NVMLError_Uninitialized(NVMLError):
    value = NVML_ERROR_UNINITIALIZED


class NVMLError_DriverNotLoaded(NVMLError):
    value = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_Timeout(NVMLError):
    value = NVML_ERROR_TIMEOUT


class NVMLError_LibraryNotFound(NVMLError):
    value = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_GpuIsLost(NVMLError):
    value = NVML_ERROR_GPU_IS_LOST


class NVMLError_ResetRequired(NVMLError):
    value = NVML_ERROR_RESET_REQUIRED


class NVMLError_Unknown(NVMLError):
    value = NVML_ERROR_UNKNOWN


@dataclass(frozen=True)
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass(frozen=True)
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class _Handle:
    index: int


_initialized = False


def _mode() -> str:
    path = os.environ.get("FAKE_NVML_FILE")
    if not path:
        return "responsive"
    try:
        words = Path(path).read_text().split()  # read at every call: a test changes it
    except OSError:
        return "responsive"
    return words[0] if words else "responsive"


def _device_call() -> str:
    """What every device query does first: fail or block as the file says."""
    if not _initialized:
        raise NVMLError_Uninitialized()
    mode = _mode()
    if mode == "hung":
        while True:  # a wedged driver: never returns
            time.sleep(3600)
    if mode in ("lost", "error"):
        raise NVMLError_GpuIsLost()
    if mode == "timeout":
        raise NVMLError_Timeout()
    return mode


def nvmlInit() -> None:
    global _initialized
    if _mode() == "none":
        raise NVMLError_LibraryNotFound()
    _initialized = True


def nvmlShutdown() -> None:
    global _initialized
    _initialized = False


def nvmlDeviceGetCount() -> int:
    _device_call()
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    _device_call()
    return _Handle(index)


def nvmlDeviceGetUtilizationRates(handle: _Handle) -> c_nvmlUtilization_t:
    mode = _device_call()
    busy = 0 if mode == "idle" else 97
    return c_nvmlUtilization_t(gpu=busy, memory=busy // 2)


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> c_nvmlMemory_t:
    _device_call()
    total, used = 24576 * _MIB, 20000 * _MIB
    return c_nvmlMemory_t(total=total, free=total - used, used=used)
