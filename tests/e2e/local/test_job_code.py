"""A job's code named by git (`code: {git, commit}`), end to end on the local stack: the
training script lives only in the repository (not in the image), every host clones the
commit onto its own disk, and the replacement of a destroyed host (its disk wiped) clones it
again and finishes the job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.conftest import api, lose_first_host_and_finish, tiny_spec, wait_for_first_checkpoint
from tests.gitrepo import git
from tests.paths import ROOT
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow


def test_the_replacement_host_fetches_the_code_again_and_finishes(
    stack: LocalStack, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # A module name the image does not have: it can only come from the cloned code.
    shutil.copy(ROOT / "examples" / "tiny-cpu" / "tiny_train.py", repo / "shipped_train.py")
    git(repo, "init", "--quiet")
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "train")
    commit = git(repo, "rev-parse", "HEAD")
    url = f"file://{repo}"
    run = "python -m shipped_train --steps 60 --checkpoint-every 10 --step-seconds 0.05"
    created = api(
        stack, "POST", "/jobs",
        json=tiny_spec(name="git-code", run=run, code={"git": url, "commit": commit}),
    )  # fmt: skip
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]
    wait_for_first_checkpoint(stack, job_id)
    lose_first_host_and_finish(stack, job_id, f"fetching the job's code: {url} at {commit}")
