"""Pure job logic: states, execution names, the heartbeat decision table."""

from __future__ import annotations

import pytest

from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.heartbeat_decision import decide_lease
from functions.domain.job import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Generation,
    Job,
    JobState,
    can_transition,
    cancel_outcome,
    execution_name,
    new_job,
    new_job_id,
)
from functions.domain.jobspec import parse_job
from tests.integration.api.helpers import SPEC, credentials, heartbeat_body

NOW = 1_800_000_000.0


def make_job(state=JobState.RUNNING, spent=0.0, generation=1) -> Job:
    job, _ = new_job(parse_job(SPEC), job_id="tiny-cpu-0000abcd", now=NOW, submitted_by="me")
    return job.model_copy(
        update={"state": state, "spent_usd": spent, "current_generation": generation}
    )


def make_gen(**kw) -> Generation:
    """A current generation that the monitor supervised a minute ago."""
    data = {
        "job_id": "tiny-cpu-0000abcd", "generation": 1, "token_hash": "h", "usd_per_hour": 0.5,
        "supervised_at": NOW - 60,
    }  # fmt: skip
    return Generation(**(data | kw))


def request(**kw) -> HeartbeatRequest:
    return HeartbeatRequest.model_validate(heartbeat_body("tiny-cpu-0000abcd", **kw))


def decide(job, gen, req=None):
    return decide_lease(job, gen, req or request(), now=NOW, supervised_max_age_s=180)


def test_states_split_into_active_and_terminal():
    assert set(JobState) == ACTIVE_STATES | TERMINAL_STATES
    assert not ACTIVE_STATES & TERMINAL_STATES
    assert JobState.STOPPING in ACTIVE_STATES


@pytest.mark.parametrize(
    ("current", "target", "ok"),
    [
        (JobState.PENDING, JobState.PROVISIONING, True),
        (JobState.RUNNING, JobState.REPLACING, True),
        (JobState.REPLACING, JobState.RUNNING, True),
        (JobState.STOPPING, JobState.CANCELLED, True),
        (JobState.FINISHED, JobState.RUNNING, False),
        (JobState.PENDING, JobState.FINISHED, False),
        (JobState.RUNNING, JobState.PENDING, False),
    ],
)
def test_transitions(current, target, ok):
    assert can_transition(current, target) is ok


def test_execution_names_are_deterministic_per_attempt_and_fit_step_functions():
    job_id = new_job_id("x" * 63)
    assert len(execution_name("provision", job_id, 9999, 99)) <= 80
    assert execution_name("replace", "j-1", 3) == "j-1-replace-g3-a1"
    assert execution_name("replace", "j-1", 3, 2) == "j-1-replace-g3-a2"
    assert execution_name("provision", "j-1", 1, 12) == "j-1-provision-g1-a12"
    assert execution_name("stop", "j-1", 3) == "j-1-stop-a1"
    assert execution_name("stop", "j-1", 3, 4) == "j-1-stop-a4"


def test_cancel_outcomes():
    assert cancel_outcome(make_job(JobState.RUNNING)) == "stop"
    assert cancel_outcome(make_job(JobState.STOPPING)) == "already_stopping"
    for state in TERMINAL_STATES:
        assert cancel_outcome(make_job(state)) == "already_ended"


def test_lease_is_the_window_or_the_remaining_budget_whichever_is_shorter():
    assert decide(make_job(), make_gen(usd_per_hour=0.01)).lease_expires_at == NOW + 3 * 3600
    assert decide(make_job(spent=0.75), make_gen()).lease_expires_at == NOW + 1800
    assert decide(make_job(spent=5.0), make_gen()).lease_expires_at == NOW  # over budget


def test_the_lease_is_computed_from_the_spend_the_last_supervision_measured():
    """The job item's `spent_usd` is written in steps; the monitor's last run keeps the exact
    figure on the generation. With the supervisor dead, spend passes the cap by at most the
    lease (invariant 4): a lease from the lagging job item would run on past the budget."""
    lagging = make_job(spent=0.25)  # $1 budget: a lease of 1.5 h at $0.50/h from this figure
    assert decide(lagging, make_gen(job_spent_usd=0.75)).lease_expires_at == NOW + 1800
    # a generation figure below the job item's (older than its last step) lengthens nothing
    assert decide(make_job(spent=0.75), make_gen(job_spent_usd=0.25)).lease_expires_at == (
        NOW + 1800
    )


@pytest.mark.parametrize(
    ("case", "supervised_at", "renewed"),
    [
        ("supervised 180 s ago: fresh", NOW - 180, True),
        ("supervised 180.5 s ago: stale", NOW - 180.5, False),
        ("never supervised (a monitor that fails on this job)", None, False),
    ],
)
def test_the_lease_is_renewed_only_while_the_generation_was_supervised(
    case, supervised_at, renewed
):
    expected = NOW + 3 * 3600 if renewed else NOW + 42  # $0.01/h: the window, not the budget
    d = decide(
        make_job(),
        make_gen(lease_expires_at=NOW + 42, supervised_at=supervised_at, usd_per_hour=0.01),
    )
    assert (d.command, d.lease_expires_at, d.lease_renewed) == ("continue", expected, renewed), case
    assert (d.reason is None) is renewed, case


def test_unsupervised_generations_get_no_new_credentials_either():
    gen = make_gen(credentials=credentials(NOW + 900), supervised_at=NOW - 600)
    assert decide(make_job(), gen, request(credentials_expire_at=NOW + 1)).credentials is None


@pytest.mark.parametrize("state", [JobState.STOPPING, *sorted(TERMINAL_STATES)])
def test_stop_for_stopping_and_ended_jobs(state):
    assert decide(make_job(state), make_gen()).command == "stop"


def test_not_current_is_superseded():
    assert decide(make_job(generation=2), make_gen()).command == "superseded"
    d = decide(make_job(), make_gen(is_current=False, credentials=credentials(NOW + 900)))
    assert (d.command, d.lease_expires_at, d.credentials) == ("superseded", 0.0, None)


def test_credentials_only_when_newer():
    gen = make_gen(credentials=credentials(NOW + 900))
    assert decide(make_job(), gen, request(credentials_expire_at=NOW + 899)).credentials
    assert decide(make_job(), gen, request(credentials_expire_at=NOW + 900)).credentials is None
