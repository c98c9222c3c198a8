"""The deployable assets do not depend on the machine or checkout that built them, so a deploy
from a new clone updates no function whose code did not change (the CDK names an asset by the
fingerprint of its files: paths and contents)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra import names, synth
from infra.synth import (
    AGENT,
    PYTHON_VERSION,
    build_lambda_asset,
    find_python,
    wheel,
)

# The bytecode tests need a Python of the runtime's version on this machine (pyenv's, here).
needs_runtime_python = pytest.mark.skipif(
    find_python(PYTHON_VERSION) is None, reason=f"no Python {PYTHON_VERSION} on this machine"
)

# CPython 3.12's bytecode magic number (3531) and a hash-based .pyc whose source is not checked.
MAGIC_312 = bytes.fromhex("cb0d0d0a")
UNCHECKED_HASH_FLAGS = (1).to_bytes(4, "little")


def cdk_fingerprint(directory: Path) -> str:
    from aws_cdk import FileSystem

    return str(FileSystem.fingerprint(str(directory)))


@needs_runtime_python
def test_two_builds_by_different_pythons_in_different_folders_give_the_same_lambda_asset(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "another" / "checkout" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(elsewhere)], check=True)
    first = build_lambda_asset(bundle=True, build=tmp_path / "a" / "build", python=sys.executable)
    second = build_lambda_asset(
        bundle=True, build=tmp_path / "b" / "build", python=str(elsewhere / "bin" / "python")
    )
    assert not (first / "bin").exists()
    assert sorted(first.glob("*.dist-info/RECORD")) == []
    assert (first / "pydantic_core").is_dir() and (first / "functions" / "api").is_dir()
    assert list(first.rglob("*.pyc")), "the bundle ships bytecode"
    assert cdk_fingerprint(first) == cdk_fingerprint(second)


@needs_runtime_python
@pytest.mark.parametrize(
    "handler",
    [names.HEARTBEAT_HANDLER, names.JOBS_HANDLER, names.LOGS_HANDLER, names.MONITOR_HANDLER,
     names.LIFECYCLE_HANDLER],
)  # fmt: skip
def test_the_bundle_holds_the_runtimes_bytecode_of_each_handler(handler: str) -> None:
    bundle = build_lambda_asset(bundle=True)
    package, module = handler.rsplit(".", 1)[0].rsplit(".", 1)
    source = bundle / package.replace(".", "/") / f"{module}.py"
    pyc = source.parent / "__pycache__" / f"{module}.cpython-312.pyc"
    data = pyc.read_bytes()
    assert data[:4] == MAGIC_312
    assert data[4:8] == UNCHECKED_HASH_FLAGS  # no timestamp: the same bytes from every build
    relative = source.relative_to(bundle).as_posix()
    assert f"/var/task/{relative}".encode() in data  # tracebacks name the deployed file
    assert str(bundle).encode() not in data


@needs_runtime_python
def test_the_dependencies_bytecode_is_in_the_bundle_too() -> None:
    bundle = build_lambda_asset(bundle=True)
    assert (bundle / "pydantic" / "__pycache__" / "main.cpython-312.pyc").is_file()
    assert (bundle / "aws_lambda_powertools" / "__pycache__" / "__init__.cpython-312.pyc").is_file()


def test_without_a_python_of_the_runtimes_version_the_bundle_ships_without_bytecode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy from a machine with no Python of the runtime's version still works (slower cold
    starts, said once), in an asset of its own."""
    monkeypatch.setattr(synth, "find_python", lambda version: None)  # a machine without one
    bundle = build_lambda_asset(bundle=True, build=tmp_path / "build")
    assert (bundle / "functions" / "api").is_dir() and (bundle / "pydantic_core").is_dir()
    assert not list(bundle.rglob("*.pyc"))
    assert "-no-bytecode-" in bundle.name
    assert f"no Python {PYTHON_VERSION} found" in capsys.readouterr().err


def test_the_agent_wheel_does_not_carry_the_checkouts_file_times(tmp_path: Path) -> None:
    wheels = []
    for name, mtime in (("old", 1_600_000_000), ("new", 1_900_000_000)):
        source = tmp_path / name / "agent"
        shutil.copytree(
            AGENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        )
        for path in source.rglob("*"):
            os.utime(path, (mtime, mtime))
        out = tmp_path / name / "wheel"
        wheel(source, out)
        (built,) = out.glob("*.whl")
        wheels.append(built)
    with zipfile.ZipFile(wheels[0]) as archive:
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert wheels[0].read_bytes() == wheels[1].read_bytes()
