"""A training command that exits non-zero: the agent's heartbeats from then on carry the end of
its output (`exit_output`), scrubbed of the agent's secrets; a run that ends well carries none."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.agent.conftest import ControlPlane, agent_env, finish, start_agent
from tether_local.r2.s3server import S3Server

HF_VALUE = "hf_AgentSideSecretValue0123456789"
CRASH = (
    "import os, sys; print('loading', os.environ['HF_TOKEN']); "
    "[print(f'noise {i}') for i in range(50)]; "
    "print('boom: NameError nme', file=sys.stderr); sys.exit(1)"
)


def test_a_crash_sends_the_end_of_its_output_scrubbed(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.secrets = {"values": {"HF_TOKEN": HF_VALUE}, "missing": []}
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN")
    code, out = finish(start_agent(env, [sys.executable, "-c", CRASH]))
    assert code == 1, out
    said = [hb for hb in control_plane.heartbeats if hb.get("exit_output")]
    assert said, out
    assert all(hb["exit_code"] == 1 for hb in said)  # never the output without the exit
    tail = said[-1]["exit_output"]
    assert tail.endswith("noise 49\nboom: NameError nme\n")
    assert len(tail.splitlines()) == 20  # the last 20 lines only
    assert HF_VALUE not in tail


def test_a_secret_in_the_tail_is_redacted(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.secrets = {"values": {"HF_TOKEN": HF_VALUE}, "missing": []}
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="HF_TOKEN")
    leak = "import os, sys; print('token', os.environ['HF_TOKEN'], file=sys.stderr); sys.exit(3)"
    code, out = finish(start_agent(env, [sys.executable, "-c", leak]))
    assert code == 3, out
    last = control_plane.last()
    assert last is not None and last["exit_output"] == "token [redacted]\n"


def test_a_run_that_ends_well_says_nothing(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    env = agent_env(tmp_path, s3_server, bucket, control_plane)
    code, out = finish(start_agent(env, [sys.executable, "-c", "print('fine')"]))
    assert code == 0, out
    assert all(hb.get("exit_output") is None for hb in control_plane.heartbeats)


def test_training_that_cannot_start_says_why(
    tmp_path: Path, s3_server: S3Server, bucket: str, control_plane: ControlPlane
) -> None:
    control_plane.secrets = {"values": {}, "missing": ["WANDB_API_KEY"]}
    env = agent_env(tmp_path, s3_server, bucket, control_plane, TETHER_SECRETS="WANDB_API_KEY")
    code, out = finish(start_agent(env, [sys.executable, "-c", "print('never')"]))
    assert code != 0, out
    last = control_plane.last()
    assert last is not None and last["exit_code"] is None
    assert "secrets not stored: WANDB_API_KEY" in last["exit_output"]
