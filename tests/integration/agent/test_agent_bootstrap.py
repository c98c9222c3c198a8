"""The agent on a rented host: its environment carries only what bootstraps it (Vast bounds each
value at 256 characters), and the job comes over the heartbeat (`tether_agent/bootstrap.py`).
Nothing is restored, trained or uploaded before it; a generation told to stop, or one whose
control plane never answers, stops its instance without ever training."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tether_agent.agent import ExitCode

from tests.integration.agent.conftest import (
    ACCESS_KEY,
    FAKE_TRAIN,
    SECRET_KEY,
    ControlPlane,
    agent_env,
    fake_train,
    finish,
    recorded,
    start_agent,
)
from tether_local.r2.s3server import S3Server

JOB_NAMES = (
    "TETHER_CHECKPOINT_DIR", "TETHER_MARKER", "TETHER_KEEP_LAST", "TETHER_S3_ENDPOINT",
    "TETHER_S3_BUCKET", "TETHER_S3_PREFIX", "TETHER_S3_ACCESS_KEY_ID",
    "TETHER_S3_SECRET_ACCESS_KEY", "TETHER_S3_WRITE_ACCESS_KEY_ID",
    "TETHER_S3_WRITE_SECRET_ACCESS_KEY",
)  # fmt: skip
DUMP_ENV = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


def bootstrap_env(
    tmp_path: Path, s3: S3Server, bucket: str, plane: ControlPlane, **kw: str
) -> dict[str, str]:
    """What Vast's env carries now: the agent's bootstrap values only."""
    env = agent_env(tmp_path, s3, bucket, plane, **kw)
    for name in JOB_NAMES:
        env.pop(name)
    return env


def job_reply(
    s3: S3Server, bucket: str, generation: int, run: str, **fields: Any
) -> dict[str, Any]:
    def key(prefix: str) -> dict[str, Any]:
        return {
            "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
            "session_token": "", "expires_at": time.time() + 3600, "prefix": prefix,
        }  # fmt: skip

    return {
        "run": run, "checkpoint_dir": "/workspace/ckpt", "marker": ".tether-complete",
        "keep_last": 3, "storage": {
            "endpoint": s3.endpoint_url, "bucket": bucket, "read": key("jobs/j1/"),
            "write": key(f"jobs/j1/g{generation}/"),
        }, **fields,
    }  # fmt: skip


def test_the_agent_waits_for_its_job_then_restores_trains_and_uploads_with_it(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    # Generation 1 (its job in the environment, as tests run it) leaves checkpoints 1 and 2.
    env1 = agent_env(tmp_path / "host1", s3_server, bucket, control_plane)
    assert finish(start_agent(env1, fake_train("--steps", "2")))[0] == 0
    candidates = json.loads(recorded(control_plane.last()))
    seen = tmp_path / "seen.json"
    run = " && ".join(
        (
            shlex.join([sys.executable, "-c", DUMP_ENV, str(seen)]),
            shlex.join([sys.executable, str(FAKE_TRAIN), "--steps", "1"]),
        )
    )
    control_plane.job = job_reply(
        s3_server, bucket, 2, run, env={"JOB_GREETING": "hello world"}, restore=candidates
    )
    control_plane.job_withheld = 5
    disk = tmp_path / "host2" / "disk"
    env2 = bootstrap_env(
        tmp_path / "host2", s3_server, bucket, control_plane, TETHER_GENERATION="2",
        TETHER_PATH_ROOT=str(disk),
    )  # fmt: skip
    first = len(control_plane.heartbeats)
    agent = start_agent(env2, [])  # no command: the job's `run`, as on a rented host
    code, out = finish(agent)
    assert code == 0, out
    beats = control_plane.heartbeats[first:]
    asking = [hb for hb in beats if hb["wants_job"]]
    assert len(asking) >= 6  # five answered without the job, then the one that got it
    assert all(hb["phase"] == "starting" and hb["restore"] is None for hb in asking)
    assert all(hb["generation"] == 2 for hb in beats)
    assert not any(hb["wants_job"] for hb in beats[len(asking) :])  # asked only until it came
    last = control_plane.last()
    assert last is not None and last["phase"] == "finished"
    # The restore list, the credentials and the checkpoint dir came with the job.
    assert last["restored_checkpoint"]["step"] == 2
    assert last["restore"] == {"outcome": "restored", "candidates": 1, "skipped": []}
    assert last["last_checkpoint"]["manifest_key"] == (
        "jobs/j1/g2/checkpoints/000000000003/manifest.json"
    )
    assert (disk / "workspace" / "ckpt" / "checkpoint-3").is_dir()  # below TETHER_PATH_ROOT
    child = json.loads(seen.read_text())
    assert child["JOB_GREETING"] == "hello world"  # the job's env, as Vast's env carried it
    assert child["TETHER_CHECKPOINT_DIR"] == str(disk / "workspace" / "ckpt")
    assert child["TETHER_RESTORED_STEP"] == "2"
    for secret in ("TETHER_AGENT_TOKEN", "TETHER_S3_SECRET_ACCESS_KEY", "TETHER_S3_ACCESS_KEY_ID"):
        assert secret not in child


def test_a_generation_superseded_before_its_job_came_stops_its_instance_untrained(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    ran = tmp_path / "ran"
    control_plane.job = job_reply(s3_server, bucket, 1, f"touch {ran}")
    control_plane.command = "superseded"
    env = bootstrap_env(tmp_path, s3_server, bucket, control_plane)
    code, out = finish(start_agent(env, []))
    assert code == ExitCode.SUPERSEDED, out
    assert not ran.exists()
    assert [c["method"] for c in control_plane.vast_calls] == ["PUT"]
    assert control_plane.vast_calls[0]["path"] == "/api/v0/instances/4242/"


@pytest.mark.parametrize("refusal", ["down", "wrong token"])
def test_a_host_that_never_gets_its_job_stops_itself_when_its_lease_ends(
    tmp_path: Path,
    s3_server: S3Server,
    bucket: str,
    control_plane: ControlPlane,
    refusal: str,
) -> None:
    ran = tmp_path / "ran"
    control_plane.job = job_reply(s3_server, bucket, 1, f"touch {ran}")
    if refusal == "down":
        control_plane.down = True
    else:
        control_plane.token = "the-current-token"
    env = bootstrap_env(
        tmp_path, s3_server, bucket, control_plane,
        TETHER_LEASE_EXPIRES_AT=str(time.time() + 2),
    )  # fmt: skip
    started = time.monotonic()
    code, out = finish(start_agent(env, []))
    assert code == ExitCode.LEASE_EXPIRED, out
    assert time.monotonic() - started >= 1.5  # it kept trying until its lease ended
    assert not ran.exists() and not (tmp_path / "ckpt").exists()
    assert [c["method"] for c in control_plane.vast_calls] == ["PUT"]
    assert "lease expired before the job came" in out
