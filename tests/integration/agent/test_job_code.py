"""The job's code from git (`code: {git, commit}`): cloned at the commit, the command run in it,
and every way it cannot be fetched ends the generation before training (exit 14)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tether_agent.agent import ExitCode
from tether_agent.job_code import CodeUnavailable, fetch_git
from tether_agent.storage_credentials import Credentials, CredentialStore

from tests.gitrepo import git
from tests.integration.agent.conftest import (
    ACCESS_KEY,
    SECRET_KEY,
    ControlPlane,
    agent_env,
    finish,
    start_agent,
)
from tether_local.r2.s3server import S3Server


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository with two commits: (path, first commit, second commit = the branch head)."""
    path = tmp_path / "origin"
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    (path / "train.py").write_text("print('version one')\n")
    git(path, "add", ".")
    git(path, "commit", "--quiet", "-m", "one")
    first = git(path, "rev-parse", "HEAD")
    (path / "train.py").write_text("print('version two')\n")
    git(path, "commit", "--quiet", "-am", "two")
    return path, first, git(path, "rev-parse", "HEAD")


def test_fetches_the_named_commit_not_the_branch_head(
    tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    origin, first, _ = repo
    dest = tmp_path / "work" / "code"
    assert fetch_git(f"file://{origin}", first, dest) == dest
    assert (dest / "train.py").read_text() == "print('version one')\n"
    assert git(dest, "rev-parse", "HEAD") == first
    assert sorted(p.name for p in dest.parent.iterdir()) == ["code"]  # no staging left behind


def test_replaces_code_left_by_an_earlier_run(tmp_path: Path, repo: tuple[Path, str, str]) -> None:
    origin, _, second = repo
    dest = tmp_path / "code"
    dest.mkdir()
    (dest / "stale.py").write_text("old")
    fetch_git(f"file://{origin}", second, dest)
    assert not (dest / "stale.py").exists()
    assert (dest / "train.py").read_text() == "print('version two')\n"


def test_an_unknown_commit_is_refused_and_nothing_is_left(
    tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    origin, _, _ = repo
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(CodeUnavailable, match=f"commit {missing}"):
        fetch_git(f"file://{origin}", missing, tmp_path / "code")
    assert list(tmp_path.iterdir()) == [origin.parent / "origin"]


def test_an_unreachable_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CodeUnavailable, match="git fetch file:///nonexistent/repo failed"):
        fetch_git("file:///nonexistent/repo", "a" * 40, tmp_path / "code")


def test_a_missing_git_says_so(
    tmp_path: Path, repo: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    origin, first, _ = repo
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(CodeUnavailable, match="this image has no `git` on PATH"):
        fetch_git(f"file://{origin}", first, tmp_path / "code")


def test_agent_runs_the_command_in_the_cloned_code(
    tmp_path: Path,
    s3_server: S3Server,
    bucket: str,
    control_plane: ControlPlane,
    repo: tuple[Path, str, str],
) -> None:
    origin, first, _ = repo
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane,
        TETHER_CODE_GIT=f"file://{origin}", TETHER_CODE_COMMIT=first,
    )  # fmt: skip
    show = "import os; print('cwd', os.getcwd(), os.environ['TETHER_CODE_DIR'])"
    code, out = finish(start_agent(env, [sys.executable, "train.py"]))
    assert code == 0, out
    assert "version one" in out
    code, out = finish(start_agent(env, [sys.executable, "-c", show]))
    assert code == 0, out
    work_code = tmp_path / "work" / "code"
    assert f"cwd {work_code} {work_code}" in out
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished"


def test_agent_without_git_fails_the_generation_before_training(
    tmp_path: Path,
    s3_server: S3Server,
    bucket: str,
    control_plane: ControlPlane,
    repo: tuple[Path, str, str],
) -> None:
    origin, first, _ = repo
    no_git = tmp_path / "bin"
    no_git.mkdir()
    (no_git / "python").symlink_to(sys.executable)
    marker = tmp_path / "trained"
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane,
        TETHER_CODE_GIT=f"file://{origin}", TETHER_CODE_COMMIT=first, PATH=str(no_git),
    )  # fmt: skip
    code, out = finish(start_agent(env, ["python", "-c", f"open({str(marker)!r}, 'w')"]))
    assert code == 14 and ExitCode.CODE_UNAVAILABLE.value == 14, out
    assert not marker.exists()  # training never started
    last = control_plane.last()
    assert last is not None
    assert last["phase"] == "failed" and last["exit_code"] is None
    assert "cannot fetch the job's code" in out and "no `git` on PATH" in out
    shipped = _shipped_log(s3_server, bucket)  # the reason reaches `tether logs` too
    assert "[tether] cannot fetch the job's code: " in shipped
    assert "no `git` on PATH: install git in the image; training not started" in shipped


def _shipped_log(s3: S3Server, bucket: str) -> str:
    creds = Credentials(ACCESS_KEY, SECRET_KEY, "", None, s3.endpoint_url, bucket)
    client = CredentialStore(creds).client(creds)
    keys = client.list_objects_v2(Bucket=bucket, Prefix="jobs/j1/g1/logs/").get("Contents", [])
    return "".join(
        client.get_object(Bucket=bucket, Key=k["Key"])["Body"].read().decode() for k in keys
    )


def test_agent_refuses_half_a_code_setting(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_CODE_GIT="https://example.com/r.git"
    )
    code, out = finish(start_agent(env, [sys.executable, "-c", "pass"]))
    assert code == ExitCode.BAD_CONFIG, out
    assert "TETHER_CODE_GIT and TETHER_CODE_COMMIT must be set together" in out
