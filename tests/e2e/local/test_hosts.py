"""Hosts are no kinder than rented machines, end to end: the training command runs with the
job's image (its interpreter and packages, none of the agent's), so a job that would fail on a
real host fails here with the same error; and a host the lifecycle destroys loses its disk."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    api,
    provision_by_hand,
    s3_keys,
    stored_heartbeat,
    tiny_spec,
    wait_for,
)
from tether_local.hosts.images import stand_in
from tether_local.hosts.local_hosts import SYSTEM_PATH
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}


def _ended(stack: LocalStack, job_id: str) -> Any:
    return wait_for(
        "the agent's last heartbeat",
        lambda: (
            (hb := stored_heartbeat(stack, job_id)) and hb.phase in ("finished", "failed") and hb
        ),
        timeout_s=45,
    )


@pytest.mark.parametrize(
    ("image", "run", "error"),
    [
        # The agent's own dependencies: on a real host they live in its venv, not the image.
        ("python:3.12-slim", "python -c 'import boto3'", "No module named 'boto3'"),
        # The demo's old command: the script lived inside the agent package.
        (
            "python:3.12-slim",
            "python -m tether_agent.examples.tiny_train --steps 30 --checkpoint-every 10",
            "No module named 'tether_agent'",
        ),
        # What this machine's interpreter has is not the image's.
        ("python:3.12-slim", "python -c 'import moto'", "No module named 'moto'"),
        # The demo's script comes with its code (`code.dir`), never with the image.
        ("python:3.12-slim", "python -c 'import tiny_train'", "No module named 'tiny_train'"),
    ],
)
def test_a_job_importing_what_only_the_agent_had_fails_as_on_a_real_host(
    stack: LocalStack, image: str, run: str, error: str
) -> None:
    job = provision_by_hand(stack, run, image=image)
    host = job.host(stack)

    last = _ended(stack, job.job_id)

    assert last.phase == "failed" and last.exit_code == 1, host.log_text()[-2000:]
    assert f"ModuleNotFoundError: {error}" in host.log_text(), host.log_text()[-2000:]
    assert last.last_checkpoint is None and not last.step  # it never pretended to train
    assert not [k for k in s3_keys(stack, job.job_id) if "/checkpoints/" in k]


def test_the_training_command_runs_on_the_images_interpreter(stack: LocalStack) -> None:
    probe = (
        "import json, os, sys, importlib.util as u; print('IMAGE-ENV ' + json.dumps({"
        "'prefix': sys.prefix, 'path': os.environ['PATH'], "
        "'pythonpath': os.environ.get('PYTHONPATH'), 'venv': os.environ.get('VIRTUAL_ENV'), "
        "'found': {m: u.find_spec(m) is not None for m in "
        "('tiny_train', 'tether_hooks', 'moto', 'boto3', 'tether_agent')}}))"
    )
    job = provision_by_hand(stack, f"python -c {shlex.quote(probe)}", image="python:3.12-slim")
    host = job.host(stack)

    last = _ended(stack, job.job_id)

    assert last.phase == "finished", host.log_text()[-2000:]
    line = next(x for x in host.log_text().splitlines() if x.startswith("IMAGE-ENV "))
    seen = json.loads(line.removeprefix("IMAGE-ENV "))
    image = stand_in("python:3.12-slim")
    assert Path(seen["prefix"]) == image.root
    assert seen["path"] == f"{image.bin}:{SYSTEM_PATH}"
    assert seen["venv"] is None
    # Only the hooks the agent adds on purpose (tether_hooks.py and the framework hooks).
    hooks = Path(seen["pythonpath"])
    assert hooks.parts[-2:] == ("tether_agent", "_hooks")
    assert sorted(p.name for p in hooks.glob("*.py")) == [
        "sitecustomize.py",  # installs the framework hooks (tether_autohooks), then the image's
        "tether_autohooks.py",
        "tether_hooks.py",
    ]
    assert seen["found"] == {
        "tiny_train": False,  # the example's script comes with its code, not the image
        "tether_hooks": True,
        "moto": False,
        "boto3": False,
        "tether_agent": False,
    }


def test_a_cancelled_jobs_host_loses_its_disk(stack: LocalStack) -> None:
    """The lifecycle's destroy (here after a user's cancel) deletes the disk: outputs written
    outside the checkpoints do not survive, as on Vast."""
    run = "mkdir -p outputs && echo 'hours of work' > outputs/result.txt && exec sleep 600"
    created = api(stack, "POST", "/jobs", json=tiny_spec(name="disk-gone", run=run))
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert stack.hosts is not None

    def written() -> Path | None:
        stack.tick()
        hosts = stack.hosts.for_job(job_id) if stack.hosts else []
        found = [h.disk / "outputs" / "result.txt" for h in hosts]
        return next((p for p in found if p.exists()), None)

    output = wait_for("the job's output on its host", written, timeout_s=45)
    host = stack.hosts.for_job(job_id)[0]
    cancelled = api(stack, "POST", f"/jobs/{job_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text

    def ended() -> dict[str, Any] | None:
        stack.tick()
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in TERMINAL and host.state == "destroyed" else None

    job = wait_for("the job to end and its host to be destroyed", ended, timeout_s=45)
    assert job["state"] == "CANCELLED"
    assert not output.exists() and not host.disk.exists()
