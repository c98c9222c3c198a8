"""The `tether-hooks` distribution, installed as a user would (`pip install` of its folder into a
fresh venv, building through the package index once, as the agent's wheel does): a script that
imports it runs outside tether, where the hooks do nothing, and the installed module is the very
file the agent puts on the training command's PYTHONPATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tether_agent.training_env import HOOKS_DIR

from tests.unit.agent.test_rules import NOOP_SCRIPT

pytestmark = pytest.mark.slow


def test_pip_installed_hooks_import_and_do_nothing_outside_tether(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: setuptools writes build/ and *.egg-info beside it
    shutil.copytree(HOOKS_DIR, source, ignore=shutil.ignore_patterns("__pycache__", "build"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "PYTHON"))}
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-deps", str(source)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c",
         "import tether_hooks; print(tether_hooks.__file__)\n" + NOOP_SCRIPT],
        capture_output=True, text=True, timeout=60, check=False, cwd=work, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    installed, result = done.stdout.strip().splitlines()
    assert Path(installed).is_relative_to(venv)  # the installed copy, not the checkout's
    assert Path(installed).read_bytes() == (HOOKS_DIR / "tether_hooks.py").read_bytes()
    assert result == "_CallbackEvents None False False []"
    assert done.stderr == ""
