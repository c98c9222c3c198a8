"""`tether status` words the API's status facts (`tether_cli/job_status.py`): the state with
its last transition, step N of M with pace and ETA, the expected total with its range, the
host's real state and the last error; nothing invented for a field an older API leaves out."""

from __future__ import annotations

from typing import Any

import pytest

from tether_cli.job_status import duration, host_state_words, status_lines

NOW = 1.9e9


def view(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job_id": "tiny-cpu-1234abcd",
        "state": "RUNNING",
        "spend": {"spent_usd": 1.0, "budget_usd": 5.0, "remaining_usd": 4.0},
    }
    return base | fields


def line(lines: list[str], head: str) -> str:
    (found,) = [x for x in lines if x.startswith(head)]
    return found


PROGRESS = {
    "step": 400, "total_steps": 1000, "total_steps_from": "spec",
    "pace": {"steps_per_min": 12.0, "low": 10.8, "high": 13.2, "source": "this host"},
    "eta_s": 3000.0, "eta_low_s": 2727.3, "eta_high_s": 3333.3, "usd_per_hour": 0.6,
    "to_finish_usd": 0.5, "expected_total_usd": 1.5, "expected_total_low_usd": 1.4545,
    "expected_total_high_usd": 1.5556,
}  # fmt: skip


def test_a_recovered_job_says_so_and_not_the_old_reason() -> None:
    lines = status_lines(
        view(
            state_reason=None,
            last_transition={"text": "recovered from a dead host", "at": NOW - 240},
        ),
        NOW,
    )
    assert line(lines, "state") == "state     RUNNING, recovered from a dead host 4 min ago"
    assert not any("dead:" in x for x in lines)


def test_a_current_reason_is_shown_with_when() -> None:
    lines = status_lines(
        view(
            state="REPLACING",
            state_reason="dead: no heartbeat for 400 s",
            last_transition={"text": "replacing its host", "at": NOW - 30},
        ),
        NOW,
    )
    assert line(lines, "state") == "state     REPLACING: dead: no heartbeat for 400 s (30 s ago)"


def test_step_of_total_pace_eta_and_the_expected_total_with_its_range() -> None:
    lines = status_lines(view(progress=PROGRESS), NOW)
    assert line(lines, "progress") == (
        "progress  step 400 of 1000 (40%), 12.0 steps/min measured on this host, "
        "ETA 50 min (45 min–56 min), at 2030-03-17 18:36:40Z"
    )
    i = lines.index(line(lines, "spend"))
    assert lines[i + 1] == (
        "          expected total $1.50 ($1.45–$1.56): $0.500 more to finish at $0.600/h"
    )


@pytest.mark.parametrize(
    ("progress", "shown"),
    [
        ({"step": None, "total_steps": None}, "progress  no step reported yet"),
        (
            {"step": 50, "total_steps": None},
            "progress  step 50; total unknown (give total_steps in the spec, or write "
            '{"step": n, "total_steps": m} to the progress file)',
        ),
        (
            {"step": 50, "total_steps": 1000},
            "progress  step 50 of 1000 (5%), pace unknown until the host reports steps",
        ),
        ({"step": 1000, "total_steps": 1000}, "progress  step 1000 of 1000 (100%)"),
    ],
)
def test_what_is_not_known_is_said(progress: dict[str, Any], shown: str) -> None:
    lines = status_lines(view(progress=progress), NOW)
    assert line(lines, "progress") == shown
    assert not any("expected total" in x for x in lines)


def test_an_older_api_without_the_facts_gets_the_old_lines() -> None:
    lines = status_lines(view(host={"generation": 1, "status": "running"}), NOW)
    assert not any(x.startswith("progress") for x in lines)
    assert line(lines, "state") == "state     RUNNING"
    assert line(lines, "host").endswith("(running)")


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ({"state": "training"}, "training"),
        ({"state": "lost", "state_since": NOW - 300}, "lost: no heartbeat since 5 min ago"),
        (
            {"state": "provisioning", "state_since": NOW - 90},
            "provisioning: rented 90 s ago, its agent has not reported yet",
        ),
        ({"state": "replaced"}, "replaced: being destroyed"),
        ({"status": "provisioning"}, "provisioning"),  # an older API: the record's
    ],
)
def test_the_host_shows_its_real_state(host: dict[str, Any], words: str) -> None:
    assert host_state_words(host, NOW) == words


def test_the_host_line_ends_with_the_real_state_not_the_record() -> None:
    host = {"generation": 2, "instance_id": 1002, "status": "provisioning", "state": "training"}
    assert line(status_lines(view(host=host), NOW), "host") == (
        "host      generation 2, Vast instance 1002 (training)"
    )


def test_the_last_error_is_one_line() -> None:
    lines = status_lines(
        view(last_error={"generation": 1, "text": "host replaced as dead: offline"}), NOW
    )
    assert line(lines, "error") == "error     generation 1: host replaced as dead: offline"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(45, "45 s"), (119, "119 s"), (120, "2 min"), (3000, "50 min"), (7200, "2.0 h"),
     (12600, "3.5 h"), (4 * 86400, "4 d"), (None, "-")],
)  # fmt: skip
def test_durations(seconds: float | None, shown: str) -> None:
    assert duration(seconds) == shown


def test_the_fetch_command_keeps_the_flags_the_status_ran_with() -> None:
    recorded = {"files": 2, "bytes": 10240, "generation": 1}
    shown = line(status_lines(view(outputs=recorded), NOW, " --local"), "outputs")
    assert shown.endswith("tether download tiny-cpu-1234abcd --outputs --local")
