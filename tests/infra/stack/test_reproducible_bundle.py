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

from infra.synth import AGENT, build_lambda_asset, wheel


def cdk_fingerprint(directory: Path) -> str:
    from aws_cdk import FileSystem

    return str(FileSystem.fingerprint(str(directory)))


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
    assert cdk_fingerprint(first) == cdk_fingerprint(second)


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
