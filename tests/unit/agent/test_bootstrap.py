"""The agent's side of the job over the heartbeat (`tether_agent/bootstrap.py`): when it asks,
and how the job becomes the names its settings read."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether_agent.bootstrap import environ_with_job, job_in_environ, load_bootstrap_settings
from tether_agent.protocol import JobBootstrap
from tether_agent.settings import SettingsError, load_settings

KEY = {"secret_access_key": "s", "session_token": "t" * 680, "expires_at": 2e9}
JOB = JobBootstrap.model_validate(
    {
        "run": "python train.py",
        "checkpoint_dir": "/workspace/ckpt",
        "marker": ".done",
        "progress_file": "relative/progress.json",
        "keep_last": 2,
        "outputs_dir": "/workspace/out",
        "env": {"JOB_VAR": "x"},
        "storage": {
            "endpoint": "https://r2.example",
            "bucket": "b",
            "read": {**KEY, "access_key_id": "r", "prefix": "jobs/j/"},
            "write": {**KEY, "access_key_id": "w", "prefix": "jobs/j/g2/"},
        },
    }
)
INSTANCE_ENV = {
    "TETHER_JOB_ID": "j",
    "TETHER_GENERATION": "2",
    "TETHER_API_URL": "https://api.example",
    "TETHER_AGENT_TOKEN": "tok",
    "CONTAINER_ID": "7",
    "CONTAINER_API_KEY": "k",
}


def test_an_instance_env_asks_for_the_job_and_one_that_carries_it_does_not() -> None:
    assert not job_in_environ(INSTANCE_ENV)
    assert job_in_environ(environ_with_job(INSTANCE_ENV, JOB))
    with pytest.raises(SettingsError, match="TETHER_CHECKPOINT_DIR: required"):
        load_settings(INSTANCE_ENV)  # the job is needed before anything starts


def test_the_job_becomes_the_agents_settings_with_paths_below_the_root() -> None:
    settings = load_settings(environ_with_job(INSTANCE_ENV, JOB, Path("/disk")))
    assert settings.run == "python train.py"
    assert settings.checkpoint_dir == Path("/disk/workspace/ckpt")
    assert settings.outputs_dir == Path("/disk/workspace/out")
    assert settings.progress_file == Path("relative/progress.json")  # relative: as given
    assert (settings.s3_access_key_id, settings.s3_write_access_key_id) == ("r", "w")
    assert settings.s3_session_token == "t" * 680 and settings.s3_prefix == "jobs/j/"
    assert settings.restore_checkpoints is None and settings.keep_last == 2
    on_vast = load_settings(environ_with_job(INSTANCE_ENV, JOB))
    assert on_vast.checkpoint_dir == Path("/workspace/ckpt")


def test_the_bootstrap_settings_name_what_is_missing() -> None:
    with pytest.raises(SettingsError, match="TETHER_AGENT_TOKEN: required"):
        load_bootstrap_settings({k: v for k, v in INSTANCE_ENV.items() if "TOKEN" not in k})
    assert load_bootstrap_settings(INSTANCE_ENV).generation == 2
