"""Attempts of a lifecycle transition (functions/domain/attempts.py): which attempt the monitor
starts, when it gives up, and what a job in the middle of a transition waits for."""

from __future__ import annotations

import pytest

from functions.domain.attempts import (
    MAX_ATTEMPTS,
    doomed_instance_reason,
    give_up,
    next_step,
    transition_under_way,
)
from functions.domain.job import JobState, TransitionRequest
from functions.domain.reasons import stop_reason_for
from tests.unit.domain.builders import NOW, job


def request(action: str = "stop", generation: int = 1) -> TransitionRequest:
    return TransitionRequest.model_validate(
        {"action": action, "job_id": "t-0123abcd", "generation": generation, "reason": "why"}
    )


@pytest.mark.parametrize(
    ("action", "attempt", "status", "kind", "next_attempt"),
    [
        ("stop", 1, None, "start", 1),  # never started (or its start was lost)
        ("stop", 3, None, "start", 3),
        ("stop", 1, "RUNNING", "under_way", 1),
        ("stop", 1, "PENDING_REDRIVE", "under_way", 1),
        ("stop", 2, "SUCCEEDED", "done", 2),
        ("stop", 1, "FAILED", "look_further", 2),
        ("stop", 1, "TIMED_OUT", "look_further", 2),
        ("stop", 1, "ABORTED", "look_further", 2),
        ("replace", 4, "FAILED", "look_further", 5),
        ("replace", 5, "FAILED", "give_up", 5),
        ("provision", 4, "TIMED_OUT", "look_further", 5),
        ("provision", 5, "ABORTED", "give_up", 5),
        ("stop", 5, "FAILED", "look_further", 6),
        ("stop", 19, "FAILED", "look_further", 20),
        ("stop", 20, "FAILED", "give_up", 20),
        ("replace", 5, "RUNNING", "under_way", 5),
        ("replace", 5, "SUCCEEDED", "done", 5),
    ],
)
def test_next_step(action: str, attempt: int, status: str | None, kind: str, next_attempt: int):
    step = next_step(request(action), attempt, status)
    assert (step.kind, step.attempt) == (kind, next_attempt)


def test_the_caps_are_five_for_renting_and_twenty_for_a_stop():
    assert MAX_ATTEMPTS == {"provision": 5, "replace": 5, "stop": 20}


def test_a_replace_or_provision_given_up_stops_the_job_as_failed():
    stop = give_up(request("replace", generation=3), 5)
    assert stop is not None and stop.action == "stop" and stop.generation == 2
    assert stop.attempt == 1 and stop.execution_name == "t-0123abcd-stop-a1"
    assert stop_reason_for(stop.reason) == "failed"
    assert "replace of generation 3 failed 5 times" in stop.reason
    first = give_up(request("provision", generation=1), 5)
    assert first is not None and first.action == "stop" and first.generation == 0
    assert stop_reason_for(first.reason) == "failed"


def test_a_stop_given_up_has_nothing_to_fall_back_on():
    assert give_up(request("stop"), 20) is None


@pytest.mark.parametrize(
    ("state", "name", "reason"),
    [
        (JobState.PENDING, "t-0123abcd-provision-g1-a1", "submitted"),
        (JobState.PROVISIONING, "t-0123abcd-provision-g1-a1", "submitted"),
        (JobState.REPLACING, "t-0123abcd-replace-g2-a1", "hung: GPU unresponsive 400 s"),
        (JobState.STOPPING, "t-0123abcd-stop-a1", "over_budget"),
    ],
)
def test_a_job_mid_transition_waits_for_the_transition_its_state_names(
    state: JobState, name: str, reason: str
):
    current = 0 if state in (JobState.PENDING, JobState.PROVISIONING) else 1
    found = transition_under_way(
        job(
            state,
            current,
            state_reason="hung: GPU unresponsive 400 s",
            stop_reason="over_budget",
        )
    )
    assert found is not None and found.execution_name == name and found.reason == reason


def test_a_replacing_job_without_a_reason_and_a_stopping_one_without_a_stop_reason():
    replacing = transition_under_way(job(JobState.REPLACING, 2, state_reason=""))
    assert replacing is not None and replacing.reason == "replacing"
    assert replacing.generation == 3
    stopping = transition_under_way(job(JobState.STOPPING, 2))
    assert stopping is not None and stopping.reason == "cancelled" and stopping.generation == 2


@pytest.mark.parametrize(
    "state",
    [
        JobState.RUNNING,
        JobState.FINISHED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.OVER_BUDGET,
    ],
)
def test_running_and_ended_jobs_wait_for_no_transition(state: JobState):
    assert transition_under_way(job(state)) is None


@pytest.mark.parametrize(
    ("state", "generation", "in_state_s", "reason"),
    [
        (JobState.STOPPING, 1, 59, None),  # within the grace: its stop destroys it
        (JobState.STOPPING, 1, 60, "its job has been stopping for 60 s"),
        (JobState.STOPPING, 2, 600, "its job has been stopping for 600 s"),
        (JobState.REPLACING, 1, 59, None),
        (JobState.REPLACING, 1, 60, "its job has been replacing generation 1 for 60 s"),
        (JobState.REPLACING, 2, 600, None),  # the replacement being rented
        (JobState.RUNNING, 1, 600, None),
        (JobState.PROVISIONING, 1, 600, None),
        (JobState.PENDING, 1, 600, None),
    ],
)
def test_the_instances_a_stuck_transition_would_destroy_are_doomed_after_the_grace(
    state: JobState, generation: int, in_state_s: float, reason: str | None
):
    stuck = job(state, 1, updated_at=NOW - in_state_s)
    assert doomed_instance_reason(stuck, generation, now=NOW, grace_s=60) == reason


def test_a_clock_behind_the_last_move_counts_as_no_time_in_the_state():
    ahead = job(JobState.STOPPING, 1, updated_at=NOW + 5)
    assert doomed_instance_reason(ahead, 1, now=NOW, grace_s=0) == (
        "its job has been stopping for 0 s"
    )
    assert doomed_instance_reason(ahead, 1, now=NOW, grace_s=1) is None
