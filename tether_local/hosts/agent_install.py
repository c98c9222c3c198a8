"""The agent's install for local hosts: a venv under build/ per agent wheel (and GPU kind),
built once and shared by every host of every stack (`tether_local.hosts.local_hosts`)."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from infra.synth import BUILD, build_agent_wheel
from tether_local.hosts import fake_nvml as fake_nvml_module


def agent_venv(*, fake_nvml: bool = False) -> Path:
    """A venv under build/ with the agent wheel installed (built once per wheel, reused).

    The wheel is installed with pip `--no-deps`; its dependencies (boto3, httpx, pydantic,
    watchdog) come from this interpreter's site-packages through a `.pth` line, because tests
    may not reach PyPI. The agent's own code is the wheel's. None of it reaches the training
    command: that runs with the image's interpreter (`tether_local.hosts.images`). With `fake_nvml`,
    a venv of its own whose site-packages also holds the fake `pynvml` (where a real host's venv
    has nvidia-ml-py's, ahead of anything a `.pth` line adds)."""
    wheel_dir = build_agent_wheel(bundle=True)
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise RuntimeError(f"no agent wheel in {wheel_dir}")
    name = f"agent-{wheel_dir.name}"
    if fake_nvml:
        name += "-nvml-" + hashlib.sha256(fake_nvml_module.PYNVML.read_bytes()).hexdigest()[:12]
    target = BUILD / "local-host" / name
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".lock").open("w") as lock:  # xdist workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        # Built in place under the lock: a venv's scripts name its absolute path.
        shutil.rmtree(target, ignore_errors=True)
        _run([sys.executable, "-m", "venv", "--without-pip", str(target)])
        python = target / "bin" / "python"
        _run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
             "--no-deps", "--no-index", "--disable-pip-version-check", str(wheels[-1])]
        )  # fmt: skip
        site = _site_packages(python)
        ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
        (Path(site) / "tether-local-deps.pth").write_text("\n".join(ours) + "\n")
        if fake_nvml:
            shutil.copy(fake_nvml_module.PYNVML, Path(site) / "pynvml.py")
        (target / ".complete").write_text(wheels[-1].name + "\n")
    return target


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}… failed:\n{done.stdout}{done.stderr}"[-2000:])


def _site_packages(python: Path) -> str:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


__all__ = ["agent_venv"]
