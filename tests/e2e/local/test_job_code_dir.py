"""A job's code from a directory (`code: {dir: .}`), end to end on the local stack through the
CLI: `tether submit` packs the directory (the .gitignore'd weights stay home), uploads it through
the presigned URL the jobs API hands out, and submits the archive's sha256; the lifecycle copies
it into the job's prefix; every host downloads, verifies and extracts it, and the replacement of
a destroyed host (its disk wiped) does so again and finishes the job. And a directory that
cannot ship stores and uploads nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import (
    api,
    lose_first_host_and_finish,
    s3_keys,
    tiny_spec,
    wait_for_first_checkpoint,
)
from tests.paths import ROOT
from tether_cli import code_pack
from tether_cli.api_client import API_URL_ENV
from tether_cli.main import main
from tether_local.stack import R2_BUCKET, LocalStack

pytestmark = pytest.mark.slow

RUN = "python -m shipped_train --steps 60 --checkpoint-every 10 --step-seconds 0.05"


def _workdir(root: Path, name: str) -> Path:
    root.mkdir()
    # A module name the image does not have: it can only come from the shipped code.
    shutil.copy(ROOT / "examples" / "tiny-cpu" / "tiny_train.py", root / "shipped_train.py")
    (root / ".gitignore").write_text("weights.bin\n")
    (root / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    spec = tiny_spec(name=name, run=RUN, code={"dir": "."})
    (root / "job.yaml").write_text(yaml.safe_dump(spec))
    return root / "job.yaml"


def _uploads(stack: LocalStack) -> list[str]:
    base = stack.root / "s3" / R2_BUCKET / "code"
    return sorted(p.name for p in base.glob("*")) if base.exists() else []


def _job_names(stack: LocalStack) -> list[str]:
    return [j["job_id"] for j in api(stack, "GET", "/jobs").json()["jobs"]]


def test_the_replacement_host_downloads_the_same_archive_and_finishes(
    stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    spec_path = _workdir(tmp_path / "job", "dir-code")
    monkeypatch.setenv(API_URL_ENV, stack.api_url)
    assert main(["submit", str(spec_path), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    job_id = view["job_id"]
    archive = view["spec"]["code"]["archive"]
    assert view["spec"]["code"]["dir"] == "."
    sha = archive["sha256"]
    assert f"{sha}.tar.gz" in _uploads(stack)
    assert archive["size_bytes"] < 1024 * 1024  # the 2 MiB of ignored weights stayed home
    wait_for_first_checkpoint(stack, job_id)
    assert f"jobs/{job_id}/code/{sha}.tar.gz" in s3_keys(stack, job_id)
    fetched = f"fetching the job's code: archive jobs/{job_id}/code/{sha}.tar.gz"
    lose_first_host_and_finish(stack, job_id, fetched)

    # The same tree again: same sha256, the upload is skipped.
    assert main(["submit", str(spec_path)]) == 0
    assert "already uploaded" in capsys.readouterr().out


def test_a_directory_past_the_limit_or_unreadable_stores_and_uploads_nothing(
    stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    spec_path = _workdir(tmp_path / "job", "dir-bad")
    (spec_path.parent / ".gitignore").write_text("")  # now the weights would ship
    monkeypatch.setenv(API_URL_ENV, stack.api_url)
    jobs_before, uploads_before = _job_names(stack), _uploads(stack)
    monkeypatch.setattr(code_pack, "MAX_ARCHIVE_BYTES", 1024 * 1024)
    assert main(["submit", str(spec_path)]) == 2
    err = capsys.readouterr().err
    assert "passes 1.0 MiB compressed" in err and ".tetherignore" in err
    assert "weights.bin" in err  # named as the biggest
    monkeypatch.undo()
    monkeypatch.setenv(API_URL_ENV, stack.api_url)
    (spec_path.parent / ".gitignore").write_text("weights.bin\n")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: not str(p).endswith("shipped_train.py")
        and real_access(p, m),
    )  # fmt: skip
    assert main(["submit", str(spec_path)]) == 2
    assert "cannot read shipped_train.py: permission denied" in capsys.readouterr().err
    assert _job_names(stack) == jobs_before and _uploads(stack) == uploads_before
