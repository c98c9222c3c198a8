"""The agent's real NVML probe (`tether_agent.gpu`'s script, run as on a host: a child interpreter
with `-I`) against the fake `pynvml` of the local stack, installed where a host's venv has the
real one: each state of a GPU becomes the reading the monitor's rules expect."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether_agent import gpu

from tether_local.hosts.fake_nvml import FILE_ENV, PYNVML


@pytest.fixture(scope="module")
def host_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A venv whose site-packages holds the fake pynvml (and nothing else)."""
    venv = tmp_path_factory.mktemp("nvml-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    shutil.copy(PYNVML, Path(purelib) / "pynvml.py")
    assert Path(purelib) != Path(sysconfig.get_paths()["purelib"])
    yield str(python)


@pytest.fixture
def gpu_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpu"
    path.write_text("responsive\n")
    monkeypatch.setenv(FILE_ENV, str(path))  # the probe child inherits the agent's environment
    return path


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("responsive", gpu.Reading(True, True, 97.0, 20000.0, 24576.0)),
        ("idle", gpu.Reading(True, True, 0.0, 20000.0, 24576.0)),
        ("lost", gpu.Reading(True, False, error="GPU is lost")),
        ("timeout", gpu.Reading(True, False, error="Timeout")),
        ("hung", gpu.Reading(True, False, error="probe did not answer within 1s")),
        ("none", gpu.Reading(False, error="no NVML library")),
    ],
)
def test_the_real_probe_reads_each_gpu_state(
    host_python: str, gpu_file: Path, mode: str, expected: gpu.Reading
) -> None:
    gpu_file.write_text(mode)
    assert gpu.nvml_probe(1, python=host_python).probe() == expected


def test_a_host_that_hangs_then_recovers_is_reported_as_such(
    host_python: str, gpu_file: Path
) -> None:
    monitor = gpu.GpuMonitor(gpu.nvml_probe(0.5, python=host_python), interval_s=1)
    assert monitor.probe_once().utilization_pct == 97.0
    gpu_file.write_text("hung")
    hung = monitor.probe_once()
    assert hung.available and not hung.responsive and hung.unresponsive_s >= 0.5
    gpu_file.write_text("idle")
    recovered = monitor.probe_once()
    assert recovered.responsive and recovered.utilization_pct == 0 and recovered.unresponsive_s == 0


def test_no_nvml_library_is_checked_once(host_python: str, gpu_file: Path) -> None:
    probe = gpu.nvml_probe(1, python=host_python)
    gpu_file.write_text("none")
    assert not probe.probe().available
    gpu_file.write_text("responsive")  # a CPU host does not grow a GPU: no more children
    assert probe.probe() == gpu.Reading(False, error="no NVML library")
