"""A job's code named by git (`code: {git, commit}`), end to end on the local stack: the
training script lives only in the repository (not in the image), every host clones the
commit onto its own disk, and the replacement of a destroyed host (its disk wiped) clones it
again and finishes the job."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import api, stored_heartbeat, tiny_spec, wait_for
from tests.paths import ROOT
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_the_replacement_host_fetches_the_code_again_and_finishes(
    stack: LocalStack, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # A module name the image does not have: it can only come from the cloned code.
    shutil.copy(ROOT / "examples" / "tiny-cpu" / "tiny_train.py", repo / "shipped_train.py")
    _git(repo, "init", "--quiet")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "train")
    commit = _git(repo, "rev-parse", "HEAD")
    url = f"file://{repo}"
    run = "python -m shipped_train --steps 60 --checkpoint-every 10 --step-seconds 0.05"
    created = api(
        stack, "POST", "/jobs",
        json=tiny_spec(name="git-code", run=run, code={"git": url, "commit": commit}),
    )  # fmt: skip
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    assert stack.hosts is not None
    hosts = stack.hosts

    def checkpoint_uploaded() -> Any:
        stack.tick()
        hb = stored_heartbeat(stack, job_id)
        return hb is not None and hb.last_checkpoint is not None

    wait_for("generation 1 to upload a checkpoint", checkpoint_uploaded, timeout_s=90)
    (first,) = hosts.for_job(job_id)
    fetched = f"fetching the job's code: {url} at {commit}"
    assert fetched in first.log_text(), first.log_text()[-2000:]
    assert first.disk.exists()
    hosts.destroy(first.instance_id)  # its disk, and the cloned code on it, are gone

    def finished() -> dict[str, Any] | None:
        stack.tick()
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in {"FINISHED", "FAILED", "OVER_BUDGET"} else None

    job = wait_for("the job to end", finished, timeout_s=120)
    second = next(h for h in hosts.for_job(job_id) if h.generation == 2)
    assert job["state"] == "FINISHED", second.log_text()[-3000:]
    assert not first.disk.exists()
    assert fetched in second.log_text()
    resumed = stored_heartbeat(stack, job_id, generation=2)
    assert resumed.restore is not None and resumed.restore.outcome == "restored"
    assert resumed.step == 60 and resumed.exit_code == 0
