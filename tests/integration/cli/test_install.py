"""The CLI a user installs: `pip install .` with no extras gives a working `tether`.

A fresh venv (not this one), a real non-editable install from this checkout, then the commands
a user runs first. The local stack's commands must say in one line which extra they need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import EXAMPLES, FIXTURES, ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bare_tether(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv / "bin" / "tether"


def run(tether: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tether), *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_no_dev_or_local_package_is_installed(bare_tether: Path) -> None:
    python = bare_tether.parent / "python"
    probe = "import importlib.util as u; print([m for m in ('moto', 'pytest') if u.find_spec(m)])"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("example", ["tiny-cpu/job.yaml", "qlora-7b/job.yaml"])
def test_validate_and_plan_work_without_extras(bare_tether: Path, example: str) -> None:
    job = str(EXAMPLES / example)
    validated = run(bare_tether, "validate", job)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith("OK ")
    planned = run(
        bare_tether, "plan", job, "--offers", str(FIXTURES / "offers_small.json"), "--json"
    )
    assert planned.returncode in (0, 3), planned.stderr  # 3: valid, but no offer qualifies
    assert isinstance(json.loads(planned.stdout), dict)


def test_every_user_command_builds_its_parser(bare_tether: Path) -> None:
    for command in ("submit", "jobs", "status", "cancel", "logs", "deploy", "destroy", "secrets"):
        helped = run(bare_tether, command, "--help")
        assert helped.returncode == 0, f"{command}: {helped.stderr}"
        assert "Traceback" not in helped.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["demo"],
        ["local", "up", "--port", "0"],
        ["rehearse", str(EXAMPLES / "tiny-cpu" / "job.yaml")],
    ],
)
def test_local_stack_commands_name_the_missing_extra(bare_tether: Path, command: list[str]) -> None:
    done = run(bare_tether, *command)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "[local]" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["deploy", "destroy"])
def test_deploy_outside_a_clone_says_where_to_run_it(
    bare_tether: Path, command: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(bare_tether), command, "--yes"]
        if command == "destroy"
        else [str(bare_tether), command],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert "inside a clone of the repository" in done.stderr
    assert "Traceback" not in done.stderr
