"""A script that crashes before its first step, on every host: the job ends FAILED after two
rents (the second crash without progress is the script's own:
docs/architecture.md#replacement-caps), and `tether status` says why in the script's words."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import api, tiny_spec, wait_for
from tether_cli import api_client
from tether_cli.main import main
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}
CRASH = "python -c \"import sys; print('boom: NameError nme', file=sys.stderr); sys.exit(1)\""
MOST_RENTS = 2  # the rule: two crashes in a row without progress end the job


def test_a_deterministic_crash_ends_failed_after_two_rents_and_says_why(
    stack: LocalStack, tmp_path, capsys, monkeypatch
) -> None:
    created = api(stack, "POST", "/jobs", json=tiny_spec(name="crash-why", run=CRASH))
    assert created.status_code == 201, created.text
    job_id = created.json()["job_id"]

    def ended() -> dict[str, Any] | None:
        stack.tick()
        job: dict[str, Any] = api(stack, "GET", f"/jobs/{job_id}").json()
        return job if job["state"] in TERMINAL else None

    job = wait_for("the job to end", ended, timeout_s=90)
    assert job["state"] == "FAILED", job
    assert "the script's own error" in job["state_reason"], job["state_reason"]
    assert "boom: NameError nme" in job["state_reason"]
    rents = [url for method, url in stack.vast.request_log if method == "PUT" and "/asks/" in url]
    assert stack.hosts is not None
    assert len(rents) == len(stack.hosts.for_job(job_id)) == MOST_RENTS, rents
    assert job["restarts"] == 1
    failed = [e for e in job["timeline"] if e["kind"] == "training_failed"]
    assert [e["data"]["generation"] for e in failed] == [1, 2]
    assert all(e["data"]["exit_output"] == "boom: NameError nme\n" for e in failed)

    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(tmp_path / "local-stack.json"))
    api_client.write_local_state(stack.api_url)
    code = main(["status", job_id, "--local"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("error     generation 2: training exited with code 1: boom: NameError nme")
    assert lines[start + 1] == "          boom: NameError nme"
