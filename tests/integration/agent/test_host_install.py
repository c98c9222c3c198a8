"""The host's install, for real: the onstart script a rented host runs installs the built agent
wheel, with its `[gpu]` extra, from the package index into a fresh venv, and the agent's NVML
probe runs there against the real `nvidia-ml-py`.

Without a GPU (CI, this machine) the honest outcome is `pynvml` importable and `nvmlInit`
raising `NVMLError_LibraryNotFound`, which the probe reports as "no GPU" (`available: false`, a CPU
host, not an unhealthy one), without crashing. It needs the package index (as a host does), once.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from functions.domain import agent_env
from functions.domain.onstart import build_onstart
from infra.synth import build_agent_wheel
from tether_local.hosts.fake_nvml import pynvml as fake_pynvml

pytestmark = pytest.mark.slow

PROBE = (
    "import dataclasses, json\n"
    "from tether_agent.gpu import make_probe\n"
    "print(json.dumps(dataclasses.asdict(make_probe('nvml', timeout_s=60).probe())))\n"
)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def test_onstart_installs_nvml_and_the_probe_says_no_gpu_without_one(tmp_path: Path) -> None:
    wheel = sorted(build_agent_wheel(bundle=True).glob("*.whl"))[-1]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"  # "downloads" the presigned URL: the wheel just built
    curl.write_text(f'#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\ncp {wheel} "$2"\n')
    python = bin_dir / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for tool in (curl, python):
        tool.chmod(0o755)
    venv = tmp_path / "opt" / "tether-agent"
    work = tmp_path / "work"
    script = tmp_path / "onstart.sh"
    url = f"https://artifacts.example/{wheel.name}?X-Amz-Signature=a"
    script.write_text(build_onstart(agent_wheel_url=url, venv_dir=str(venv)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "CONTAINER_"))}
    env.update(
        {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            agent_env.JOB_ID: "j-install",  # (the rest is missing: the agent exits 2 at once)
            agent_env.WORK_DIR: str(work),
        }
    )
    done = subprocess.run(
        ["sh", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    log = (work / "onstart.log").read_text() if (work / "onstart.log").exists() else ""
    assert done.returncode == 0, done.stderr + log
    assert "agent started" in log, log
    pid = int((work / "agent.pid").read_text())
    deadline = time.monotonic() + 60
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid), "the agent started without configuration did not exit"
    assert "bad configuration" in (work / "agent.log").read_text()

    host_python = str(venv / "bin" / "python")
    imported = subprocess.run(
        [host_python, "-I", "-c", "import pynvml; print(pynvml.__file__)"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(venv))

    # The local stack's fake pynvml (tether_local/hosts/fake_nvml) offers nothing the real one
    # lacks.
    fake_names = [n for n in vars(fake_pynvml) if n.startswith(("nvml", "NVML"))]
    missing = subprocess.run(
        [host_python, "-I", "-c",
         f"import pynvml; print(*[n for n in {fake_names!r} if not hasattr(pynvml, n)])"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert not missing, f"the fake pynvml has names the real one lacks: {missing}"

    probed = subprocess.run(
        [host_python, "-I", "-c", PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert probed.returncode == 0, probed.stderr
    reading = json.loads(probed.stdout)
    if ctypes.util.find_library("nvidia-ml") is None:
        assert reading == {
            "available": False,
            "responsive": True,
            "utilization_pct": None,
            "memory_used_mb": None,
            "memory_total_mb": None,
            "error": "no NVML library",
        }
    else:  # a machine with NVML: the probe answers (or says which NVML error it got)
        assert reading["available"] in (True, False) and reading["error"] != "probe failed"
