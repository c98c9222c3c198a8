"""The job's code as an archive (`TETHER_CODE_ARCHIVE_SHA256`): downloaded from the job's prefix
with the read key, verified, extracted, and the command run in it; a tampered or missing
archive ends the generation before training (exit 14), with the reason in the shipped log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tether_agent.agent import ExitCode
from tether_agent.storage_credentials import Credentials, CredentialStore

from tests.integration.agent.conftest import (
    ACCESS_KEY,
    SECRET_KEY,
    ControlPlane,
    agent_env,
    finish,
    start_agent,
)
from tether_cli.code_pack import pack
from tether_local.r2.s3server import S3Server


def _client(s3: S3Server, bucket: str) -> Any:
    creds = Credentials(ACCESS_KEY, SECRET_KEY, "", None, s3.endpoint_url, bucket)
    return CredentialStore(creds).client(creds)


@pytest.fixture
def uploaded(tmp_path: Path, s3_server: S3Server, bucket: str) -> str:
    """A packed working directory at jobs/j1/code/<sha256>.tar.gz; its sha256."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "train.py").write_text("import pkg, os\nprint('shipped code ran in', os.getcwd())\n")
    (src / "big.bin").write_bytes(b"0" * 10_000)
    (src / ".gitignore").write_text("big.bin\n")
    packed = pack(src, out_dir=tmp_path)
    _client(s3_server, bucket).upload_file(
        str(packed.path), bucket, f"jobs/j1/code/{packed.sha256}.tar.gz"
    )
    packed.path.unlink()
    return packed.sha256


def test_the_agent_runs_the_command_in_the_verified_archive(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane, uploaded: str
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_CODE_ARCHIVE_SHA256=uploaded)
    code, out = finish(start_agent(env, [sys.executable, "train.py"]))
    assert code == 0, out
    work_code = tmp_path / "work" / "code"
    assert f"shipped code ran in {work_code}" in out
    assert not (work_code / "big.bin").exists()  # ignored: never shipped
    assert sorted(p.name for p in (tmp_path / "work").iterdir() if p.name.startswith(".")) == []
    # A second run on the same disk (a restarted agent) fetches it again over what is there.
    (work_code / "stale.py").write_text("old")
    code, out = finish(start_agent(env, [sys.executable, "train.py"]))
    assert code == 0, out
    assert not (work_code / "stale.py").exists()


def test_a_tampered_archive_is_never_run(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane, uploaded: str
) -> None:
    client = _client(s3_server, bucket)
    key = f"jobs/j1/code/{uploaded}.tar.gz"
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[-5] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    marker = tmp_path / "trained"
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_CODE_ARCHIVE_SHA256=uploaded)
    code, out = finish(start_agent(env, [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]))
    assert code == ExitCode.CODE_UNAVAILABLE and code == 14, out
    assert not marker.exists()
    assert not (tmp_path / "work" / "code").exists()
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed" and last["exit_code"] is None
    shipped = _shipped_log(s3_server, bucket)
    assert f"cannot fetch the job's code: the job's code archive {key} hashes to" in shipped
    assert f"not {uploaded}: refusing to run code" in shipped


def test_a_missing_archive_fails_the_generation_before_training(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_CODE_ARCHIVE_SHA256="ab" * 32
    )
    code, out = finish(start_agent(env, [sys.executable, "-c", "print('trained')"]))
    assert code == 14, out
    assert "trained" not in out.replace("cannot fetch", "")
    assert f"jobs/j1/code/{'ab' * 32}.tar.gz is not in storage" in out


def test_git_and_an_archive_together_are_a_configuration_error(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane,
        TETHER_CODE_GIT="https://h/r.git", TETHER_CODE_COMMIT="a" * 40,
        TETHER_CODE_ARCHIVE_SHA256="ab" * 32,
    )  # fmt: skip
    code, out = finish(start_agent(env, [sys.executable, "-c", "pass"]))
    assert code == ExitCode.BAD_CONFIG, out
    assert "TETHER_CODE_GIT and TETHER_CODE_ARCHIVE_SHA256 exclude each other" in out


def _shipped_log(s3: S3Server, bucket: str) -> str:
    client = _client(s3, bucket)
    keys = client.list_objects_v2(Bucket=bucket, Prefix="jobs/j1/g1/logs/").get("Contents", [])
    return "".join(
        client.get_object(Bucket=bucket, Key=k["Key"])["Body"].read().decode() for k in keys
    )
