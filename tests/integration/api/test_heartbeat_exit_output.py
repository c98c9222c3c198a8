"""A failed generation says why (`exit_output` in its heartbeat): once on the timeline with the
exit code, in `GET /jobs/{id}` as `error` and `last_error`, and in `tether status` as its error
lines, with the host's control characters shown, never obeyed."""

from __future__ import annotations

import pytest

from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, running_job
from tether_cli.job_status import status_lines

URL = "/agent/heartbeat"
TAIL = "Traceback (most recent call last):\n\x1b]0;owned\x07boom: NameError nme\n"

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def beat(api, job_id, **body):
    return api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(TOKEN))


def test_a_crash_goes_on_the_timeline_once_and_into_status_escaped(api):
    job_id = running_job(api)
    assert beat(api, job_id).status == 200
    crash = {"exit_code": 1, "exit_output": TAIL, "step": None, "last_checkpoint": None}
    assert beat(api, job_id, phase="uploading", **crash).status == 200
    assert beat(api, job_id, phase="failed", **crash).status == 200  # the same, said again
    view = api.jobs("GET", f"/jobs/{job_id}").body
    failed = [e for e in view["timeline"] if e["kind"] == "training_failed"]
    assert [(e["message"], e["data"]) for e in failed] == [
        (
            "g1 training exited with code 1: \x1b]0;owned\x07boom: NameError nme",
            {"generation": 1, "exit_code": 1, "exit_output": TAIL},
        )
    ]
    assert view["error"] == {"generation": 1, "exit_code": 1, "output": TAIL}
    lines = status_lines(view, api.clock.now)
    assert view["last_error"] == {
        "generation": 1,
        "text": "training exited with code 1: \x1b]0;owned\x07boom: NameError nme",
    }
    # The last error in one line, then the output's last lines.
    start = lines.index(
        "error     generation 1: training exited with code 1: \\x1b]0;owned\\x07boom: NameError nme"
    )
    assert lines[start + 1 : start + 3] == [
        "          Traceback (most recent call last):",
        "          \\x1b]0;owned\\x07boom: NameError nme",
    ]
    assert not any("\x1b" in line or "\x07" in line for line in lines)


def test_an_output_past_its_bound_is_refused(api):
    job_id = running_job(api)
    reply = beat(api, job_id, phase="failed", exit_code=1, exit_output="x" * 2049)
    assert reply.status == 400
    timeline = api.jobs("GET", f"/jobs/{job_id}").body["timeline"]
    assert "training_failed" not in [e["kind"] for e in timeline]
    assert api.jobs("GET", f"/jobs/{job_id}").body["error"] is None
