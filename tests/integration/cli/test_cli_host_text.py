"""What a hostile host writes never drives the operator's terminal: an OSC 52 sequence (it
writes the clipboard) or an 8-bit CSI sent through the real heartbeat API, a log segment or a
manifest reaches `tether status`, `logs` and `download` with its control characters shown as
escapes (tether_cli/terminal_text.py), and `--json` keeps the very same data."""

from __future__ import annotations

import contextlib
import io
import json
import time

import pytest

from functions.api import heartbeat
from functions.domain.agent_token import hash_token
from functions.domain.job import Generation, JobState, TimelineEvent
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body
from tests.integration.cli.test_cli_download import with_outputs
from tests.integration.cli.test_cli_jobs import Backend, backend, run, submit
from tether_local.aws.apigw import LocalLambdaContext, http_api_event

__all__ = ["backend"]  # the fixture, used by name

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # sets the clipboard to "rm -rf ~"
OSC52_SHOWN = "\\x1b]52;c;cm0gLXJmIH4K\\x07"
CSI_8BIT = "\x9b8m"  # hides what follows
RAW = ("\x1b", "\x9b", "\x07")


def assert_no_raw_control(text: str) -> None:
    assert not [c for c in RAW if c in text], ascii(text)


def hostile_heartbeat(backend: Backend, job_id: str) -> None:
    """Generation 1 of `job_id` is running; its host sends a heartbeat whose misplaced
    checkpoint path and skipped restore reason carry escape sequences."""
    now = time.time()
    recorded = backend.store.record_generation(
        Generation(
            job_id=job_id,
            generation=1,
            status="running",
            token_hash=hash_token(TOKEN),
            instance_id=1001,
            machine_id=77,
            offer_id=555,
            usd_per_hour=0.5,
            created_at=now,
            supervised_at=now,
        ),
        expected=[JobState.PENDING],
        now=now,
        event=TimelineEvent(job_id=job_id, at=now, kind="running", message="host up"),
    )
    assert recorded
    body = heartbeat_body(
        job_id,
        agent_time=now,
        misplaced_checkpoints=[f"out/checkpoint-40{OSC52}"],
        restore={
            "outcome": "fresh",
            "candidates": 1,
            "skipped": [{"manifest_key": "m.json", "reason": f"bad{CSI_8BIT} manifest"}],
        },
    )
    event = http_api_event("POST", "/agent/heartbeat", body=body, headers=auth())
    with contextlib.redirect_stdout(io.StringIO()):  # the handler's EMF lines
        reply = heartbeat.handler(event, LocalLambdaContext())
    assert reply["statusCode"] == 200, reply


def test_status_shows_a_hostile_heartbeat_escaped(backend: Backend, capsys) -> None:
    job_id = submit(capsys)
    hostile_heartbeat(backend, job_id)
    code, out, _ = run(capsys, "status", job_id)
    assert code == 0
    assert_no_raw_control(out)
    assert "checkpoints_misplaced" in out and f"out/checkpoint-40{OSC52_SHOWN}" in out
    assert "skipped m.json: bad\\x9b8m manifest" in out


def test_status_json_keeps_the_hostile_text_as_data(backend: Backend, capsys) -> None:
    job_id = submit(capsys)
    hostile_heartbeat(backend, job_id)
    code, out, _ = run(capsys, "status", job_id, "--json")
    assert code == 0
    assert_no_raw_control(out)
    messages = " ".join(e["message"] for e in json.loads(out)["timeline"])
    assert f"out/checkpoint-40{OSC52}" in messages and f"bad{CSI_8BIT} manifest" in messages


def test_logs_show_a_hostile_segment_escaped_and_keep_its_lines(backend: Backend, capsys) -> None:
    job_id = submit(capsys)
    segment = f"step 1\tloss 2.3\n{OSC52}step 2\n{CSI_8BIT}secret\n"
    backend.bucket.put(job_id, 1, 0, segment)
    code, out, _ = run(capsys, "logs", job_id)
    assert code == 0
    assert_no_raw_control(out)
    assert out == f"step 1\tloss 2.3\n{OSC52_SHOWN}step 2\n\\x9b8msecret\n"
    code, out, _ = run(capsys, "logs", job_id, "--json")
    assert code == 0
    assert_no_raw_control(out)
    assert json.loads(out)["text"] == segment


def test_a_hostile_manifest_path_in_a_download_error_is_escaped(
    backend: Backend, capsys, tmp_path
) -> None:
    job_id = submit(capsys)
    name = f"result{OSC52}.txt"
    with_outputs(backend, job_id, {name: b"accuracy 0.93\n"})
    backend.bucket.objects[f"jobs/{job_id}/g1/outputs/files/{name}"] = b"accuracy 0.99\n"
    code, _, err = run(capsys, "download", job_id, "--outputs", "--to", str(tmp_path / "o"))
    assert code == 1
    assert_no_raw_control(err)
    assert f"result{OSC52_SHOWN}.txt: got 14 bytes" in err


def test_a_file_name_with_control_characters_is_saved_under_its_shown_name(
    backend: Backend, capsys, tmp_path
) -> None:
    """No file on the operator's disk gets a name that drives a terminal (`ls`) or splits a
    shell loop: it is saved as `visible` shows it, its bytes unchanged."""
    job_id = submit(capsys)
    name = f"sub\n/result{OSC52}{CSI_8BIT}.txt"
    with_outputs(backend, job_id, {name: b"accuracy 0.93\n", "plain.txt": b"ok\n"})
    target = tmp_path / "o"
    code, out, err = run(capsys, "download", job_id, "--outputs", "--to", str(target), "--json")
    assert code == 0, err
    shown = f"sub\\n/result{OSC52_SHOWN}\\x9b8m.txt"
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert files[name]["saved_as"] == shown and "saved_as" not in files["plain.txt"]
    on_disk = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert on_disk == ["plain.txt", shown]
    assert (target / shown).read_bytes() == b"accuracy 0.93\n"

    code, _, err = run(capsys, "download", job_id, "--outputs", "--to", str(tmp_path / "p"))
    assert code == 0
    assert_no_raw_control(err)
    assert f"control characters; saved as {shown}" in err
