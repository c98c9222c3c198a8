"""The `tether` CLI against the local stack: submit, jobs, status, logs over real HTTP, with the
real lifecycle, monitor, agent and S3 stand-in (the logs route mints read-only keys)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import EXAMPLE_DIR, tiny_spec, wait_for
from tether_cli import api_client
from tether_cli.main import main
from tether_local.stack import LocalStack

pytestmark = pytest.mark.slow

TERMINAL = {"FINISHED", "FAILED", "CANCELLED", "OVER_BUDGET"}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    # The handlers run in their own processes and log to the stack's files: stdout is the CLI's.
    return code, out, err


def test_cli_submits_watches_and_reads_the_log(
    stack: LocalStack, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv(api_client.LOCAL_STATE_ENV, str(tmp_path / "local-stack.json"))
    api_client.write_local_state(stack.api_url)
    run = "python tiny_train.py --steps 20 --checkpoint-every 10"
    spec = tmp_path / "job.yaml"  # its code: the example's folder, shipped by `tether submit`
    shipped = {"dir": str(EXAMPLE_DIR)}
    spec.write_text(yaml.safe_dump(tiny_spec(name="cli-e2e", run=run, code=shipped)))
    code, out, err = cli(capsys, "submit", str(spec), "--local", "--json")
    assert code == 0, err
    job_id = json.loads(out)["job_id"]

    def ended() -> dict[str, Any] | None:
        stack.tick()
        code, out, err = cli(capsys, "status", job_id, "--local", "--json")
        assert code == 0, err
        view: dict[str, Any] = json.loads(out)
        return view if view["state"] in TERMINAL else None

    view = wait_for("the job to end", ended, timeout_s=60)
    assert view["state"] == "FINISHED", view
    code, out, _ = cli(capsys, "jobs", "--local", "--json")
    assert job_id in [j["job_id"] for j in json.loads(out)["jobs"]]
    code, out, err = cli(capsys, "logs", job_id, "--local", "--follow", "--interval", "0.2")
    assert code == 0, err
    assert out.startswith("[tether] code: archive ")  # fetched before anything ran
    assert "\n[tether] generation 1 on instance " in out
    assert out.endswith("[tether] training exited with 0\n")
    code, out, err = cli(capsys, "status", job_id, "--local")
    assert code == 0 and "state     FINISHED" in out
