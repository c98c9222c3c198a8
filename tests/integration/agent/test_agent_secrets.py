"""The job's user secrets on the host: asked for in the heartbeat, awaited before training, put
in the training process's environment only, scrubbed from the shipped log."""

from __future__ import annotations

import sys
from pathlib import Path

from tether_agent.agent import ExitCode

from tests.integration.agent.conftest import (
    ControlPlane,
    agent_env,
    finish,
    make_storage,
    start_agent,
)
from tether_local.r2.s3server import S3Server

HF_VALUE = "hf_AgentSideSecretValue0123456789"
# The training command prints its secret (as a careless script might) and records what it got.
PRINT_SECRET = (
    "import os, pathlib, sys; v = os.environ.get('HF_TOKEN'); print('token is', v); "
    "pathlib.Path(sys.argv[1]).write_text(repr(v))"
)


def shipped_log(s3: S3Server, bucket: str) -> str:
    storage = make_storage(s3.endpoint_url, bucket)
    try:
        keys = storage.list_keys("jobs/j1/g1/logs/")
        return b"".join(storage.get_bytes(k) or b"" for k in keys).decode()
    finally:
        storage.close()


def test_training_gets_the_secret_and_the_shipped_log_does_not(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.secrets = {"values": {"HF_TOKEN": HF_VALUE}, "missing": []}
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN")
    seen = tmp_path / "seen.txt"
    code, out = finish(start_agent(env, [sys.executable, "-c", PRINT_SECRET, str(seen)]))
    assert code == 0, out
    assert seen.read_text() == repr(HF_VALUE)  # the training process had it
    assert control_plane.heartbeats[0]["wants_secrets"] is True
    last = control_plane.last()
    assert last is not None and last["wants_secrets"] is False  # asked only until it came
    log = shipped_log(s3_server, bucket)
    assert "token is [redacted]" in log
    assert HF_VALUE not in log
    # The agent's own output says nothing of the value besides the training command's line.
    assert [line for line in out.splitlines() if HF_VALUE in line] == [f"token is {HF_VALUE}"]


def test_a_missing_secret_fails_the_generation_before_training_and_names_it(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.secrets = {"values": {"HF_TOKEN": HF_VALUE}, "missing": ["WANDB_API_KEY"]}
    env = agent_env(
        tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN,WANDB_API_KEY"
    )
    ran = tmp_path / "ran.txt"
    code, out = finish(start_agent(env, [sys.executable, "-c", PRINT_SECRET, str(ran)]))
    assert code == ExitCode.SECRETS_MISSING, out
    assert not ran.exists()  # training never started
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed" and last["exit_code"] is None
    assert "secrets not stored: WANDB_API_KEY" in out
    assert "secrets not stored: WANDB_API_KEY" in shipped_log(s3_server, bucket)
    assert HF_VALUE not in shipped_log(s3_server, bucket)


def test_secrets_that_never_come_end_the_wait_with_a_reason(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN")
    ran = tmp_path / "ran.txt"
    process = start_agent(
        env, [sys.executable, "-c", PRINT_SECRET, str(ran)], ["--secrets-wait-s", "1"]
    )
    code, out = finish(process)
    assert code == ExitCode.SECRETS_MISSING, out
    assert not ran.exists()
    assert "the job's secrets (HF_TOKEN) did not arrive within 1 s" in out
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed"


def test_a_job_without_secrets_does_not_ask(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    seen = tmp_path / "seen.txt"
    code, out = finish(start_agent(env, [sys.executable, "-c", PRINT_SECRET, str(seen)]))
    assert code == 0, out
    assert seen.read_text() == "None"
    assert all(hb["wants_secrets"] is False for hb in control_plane.heartbeats)


def test_a_secret_too_large_for_the_environment_fails_the_start_with_127(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    """Linux refuses an environment variable over 128 KiB at exec: the training command cannot
    start, so the generation fails with 127 as a shell says it (the one failure path, reached
    after the uploader started)."""
    huge = "x" * (256 * 1024)
    control_plane.secrets = {"values": {"HF_TOKEN": huge}, "missing": []}
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN")
    ran = tmp_path / "ran.txt"
    code, out = finish(start_agent(env, [sys.executable, "-c", PRINT_SECRET, str(ran)]))
    assert code == 127, out
    assert not ran.exists()
    assert "cannot start the training command: [Errno 7] Argument list too long" in out
    assert huge not in out
    last = control_plane.last()
    assert last is not None and last["phase"] == "failed" and last["exit_code"] == 127
