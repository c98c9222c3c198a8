"""A failed generation says why (`exit_output`), once on the timeline; and a crash that two
generations in a row make before a step past the one they started from is the script's own:
the job ends FAILED with the reason instead of renting again
(docs/architecture.md#replacement-caps)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.crashes import (
    crashed_without_progress,
    crashes_without_progress_before,
    failure_event,
    last_failure,
    last_output_line,
)
from functions.domain.health import Health, classify
from functions.domain.heartbeat_contract import GpuProbe, HeartbeatRequest, ResumeReport
from functions.domain.job import Generation, Heartbeat
from functions.domain.reconcile import heartbeat_view
from tests.unit.domain.health_facts import hb, state

NOW = 1_800_000_000.0
TAIL = 'Traceback (most recent call last):\n  File "train.py", line 3\nNameError: nme\n'


def beat(**fields: Any) -> Heartbeat:
    values: dict[str, Any] = {
        "at": NOW - 5, "agent_time": NOW - 5, "phase": "failed", "step": None,
        "gpu": GpuProbe(available=False), "exit_code": 1, "exit_output": TAIL,
    }  # fmt: skip
    return Heartbeat(**(values | fields))


def gen(n: int, heartbeat: Heartbeat | None, **fields: Any) -> Generation:
    values: dict[str, Any] = {
        "job_id": "t-0123abcd", "generation": n, "token_hash": "x", "heartbeat": heartbeat,
        "is_current": False, "replaced_for": "crashed",
    }  # fmt: skip
    return Generation(**(values | fields))


STARTED = ResumeReport(step=50, started_at=NOW - 30)
STEPPED = ResumeReport(step=50, started_at=NOW - 30, first_step_at=NOW - 20)


# --- the rule, as the health policy applies it ------------------------------------------------

RULE: list[tuple[str, dict[str, Any], Health]] = [
    ("a first crash without progress: restart", {}, Health.CRASHED),
    (
        "the second in a row without progress: the script's own, FAILED",
        {"crashes_without_progress_before": 1},
        Health.FAILED,
    ),
    (
        "the second, but this one got past its start: restart",
        {"crashes_without_progress_before": 1, "progressed": True},
        Health.CRASHED,
    ),
    (
        "the second, but stopped from outside (phase stopping): not the script's",
        {"crashes_without_progress_before": 1, "phase": "stopping"},
        Health.CRASHED,
    ),
    (
        "the second, but training never started (no exit code): max_restarts decides",
        {"crashes_without_progress_before": 1, "exit_code": None},
        Health.CRASHED,
    ),
]


@pytest.mark.parametrize(("name", "facts", "expected"), RULE, ids=[c[0] for c in RULE])
def test_the_scripts_own_crash(name: str, facts: dict[str, Any], expected: Health) -> None:
    facts = dict(facts)
    before = facts.pop("crashes_without_progress_before", 0)
    beat_facts: dict[str, Any] = {"phase": "failed", "exit_code": 1, "exit_output": TAIL}
    beat_facts.update(step=None, **facts)
    verdict = classify(state(heartbeat=hb(**beat_facts), crashes_without_progress_before=before))
    assert verdict.health is expected


def test_the_failed_verdict_names_the_rule_and_the_scripts_last_words() -> None:
    verdict = classify(
        state(
            heartbeat=hb(phase="failed", exit_code=1, exit_output=TAIL, step=None),
            crashes_without_progress_before=1,
        )
    )
    assert verdict.reason == (
        "training command exited with code 1 (NameError: nme); the script's own error: 2 "
        "generations in a row exited non-zero before a step past the one they started from, "
        "a new host would do the same"
    )
    assert not verdict.blames_host


# --- the facts the rule is told ------------------------------------------------------------


@pytest.mark.parametrize(
    ("heartbeat", "fields", "expected"),
    [
        (beat(), {}, True),
        (beat(resumed=STARTED), {}, True),
        (beat(resumed=STEPPED), {}, False),  # its last heartbeat reports the first step
        (beat(), {"first_step_at": NOW - 20}, False),  # stored by an earlier heartbeat
        (beat(exit_code=0, phase="finished"), {}, False),
        (beat(exit_code=None), {}, False),  # training never started: not a crash of it
        (beat(phase="stopping", exit_code=143), {}, False),  # stopped from outside
        (None, {}, False),
    ],
)
def test_crashed_without_progress(
    heartbeat: Heartbeat | None, fields: dict[str, Any], expected: bool
) -> None:
    assert crashed_without_progress(gen(1, heartbeat, **fields)) is expected


def test_only_the_crashes_right_before_in_a_row_count() -> None:
    current = gen(4, beat(), is_current=True, replaced_for=None)
    progressed = gen(1, beat(), first_step_at=NOW - 100)
    dead = gen(2, beat(), replaced_for="dead")
    crashed = gen(3, beat())
    assert crashes_without_progress_before([progressed, crashed, current], current) == 1
    assert crashes_without_progress_before([crashed, dead, current], current) == 1
    assert crashes_without_progress_before([dead, current], current) == 0
    assert crashes_without_progress_before([gen(2, beat()), crashed, current], current) == 2
    assert crashes_without_progress_before([current], current) == 0


def test_the_health_view_says_whether_the_generation_progressed() -> None:
    view = heartbeat_view(gen(1, beat(), is_current=True))
    assert view is not None
    assert (view.exit_output, view.progressed) == (TAIL, False)
    stepped = heartbeat_view(gen(1, beat(resumed=STEPPED), is_current=True))
    assert stepped is not None and stepped.progressed


# --- the event and the detail --------------------------------------------------------------


def request(**fields: Any) -> HeartbeatRequest:
    body: dict[str, Any] = {
        "job_id": "t-0123abcd", "generation": 2, "phase": "uploading",
        "gpu": {"available": False}, "agent_time": NOW, "exit_code": 1, "exit_output": TAIL,
    }  # fmt: skip
    return HeartbeatRequest.model_validate(body | fields)


def test_the_first_heartbeat_that_says_why_puts_it_on_the_timeline_once() -> None:
    event = failure_event(beat(phase="training", exit_code=None, exit_output=None), request(), NOW)
    assert event is not None
    assert (event.kind, event.message) == (
        "training_failed",
        "g2 training exited with code 1: NameError: nme",
    )
    assert event.data == {"generation": 2, "exit_code": 1, "exit_output": TAIL}
    assert failure_event(beat(), request(phase="failed"), NOW) is None  # said already
    assert failure_event(None, request(exit_output=None), NOW) is None


def test_a_generation_that_could_not_start_training_says_so() -> None:
    why = "cannot fetch the job's code: commit abc not found"
    event = failure_event(None, request(phase="failed", exit_code=None, exit_output=why), NOW)
    assert event is not None
    assert event.message == f"g2 training could not start: {why}"


def test_the_last_line_is_the_last_non_blank_one_cut_to_300() -> None:
    assert last_output_line("a\n\x1b[31mb\x1b[0m\n  \n") == "\x1b[31mb\x1b[0m"
    assert last_output_line("x" * 500) == "x" * 300
    assert last_output_line(" \n") is None
    assert last_output_line(None) is None


def test_the_detail_shows_the_newest_generations_failure() -> None:
    older = gen(1, beat(exit_output="old\n"))
    newer = gen(2, beat(exit_output=TAIL, exit_code=2))
    silent = gen(3, beat(exit_output=None, exit_code=None, phase="training"), is_current=True)
    assert last_failure([newer, older, silent]) == {
        "generation": 2,
        "exit_code": 2,
        "output": TAIL,
    }
    assert last_failure([silent]) is None
