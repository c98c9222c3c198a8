"""A stand-in for NVML's Python binding, `pynvml` (`nvidia-ml-py`): see `pynvml.py`.

`PYNVML` is the file to put where an agent's interpreter imports `pynvml` (a venv's
site-packages): `tether_local.hosts.local_hosts` does that for the hosts of the
`hung-gpu-real-probe` demo, the tests for their own venvs. `FILE_ENV` names the variable that
points it at its script file.
"""

from pathlib import Path

PYNVML = Path(__file__).with_name("pynvml.py")
FILE_ENV = "FAKE_NVML_FILE"
MODES = ("responsive", "idle", "hung", "lost", "timeout", "error", "none")

__all__ = ["FILE_ENV", "MODES", "PYNVML"]
