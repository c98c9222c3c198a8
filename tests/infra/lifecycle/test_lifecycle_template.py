"""The lifecycle definition as synthesized: every Task state ends its attempt on any error it
could not retry away, recorded on the job's timeline (no execution can fail silently and leave
a job stuck), and Lambda's own errors, its timeout among them, are retried."""

from __future__ import annotations

from typing import Any

from tests.infra.monitor.test_supervision_template import definition

NOTIFICATIONS = {"NotifyRented", "NotifyStopped", "NotifyFailed"}  # courtesy: a failure is dropped
LAMBDA_TASKS = {
    "Begin",
    "DestroyPrevious",
    "Provision",
    "Fail",
    "StopBegin",
    "DestroyAll",
    "Finish",
    "RecordFailure",
}


def _tasks(states: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in states.items() if s["Type"] == "Task"}


def _catch_all(state: dict[str, Any]) -> dict[str, Any]:
    catches = state.get("Catch", [])
    assert catches, "no Catch"
    assert catches[-1]["ErrorEquals"] == ["States.ALL"]
    last: dict[str, Any] = catches[-1]
    return last


def test_the_tasks_are_the_ones_named_here(template):
    assert set(_tasks(definition(template)["States"])) == LAMBDA_TASKS | NOTIFICATIONS


def test_every_task_state_catches_every_error(template):
    states = definition(template)["States"]
    for name, state in _tasks(states).items():
        catch = _catch_all(state)
        assert catch["ResultPath"].startswith("$."), name


def test_a_failed_step_is_named_recorded_and_fails_the_execution(template):
    states = definition(template)["States"]
    for name in LAMBDA_TASKS - {"RecordFailure"}:
        catch = _catch_all(states[name])
        assert catch["ResultPath"] == "$.error", name
        named = states[catch["Next"]]
        assert named["Type"] == "Pass" and named["Result"] == name, name
        assert named["ResultPath"] == "$.failed_state" and named["Next"] == "RecordFailure"
    record = states["RecordFailure"]
    assert record["Parameters"] == {
        "op": "attempt_failed",
        "job_id.$": "$.job_id",
        "execution.$": "$$.Execution.Name",
        "failed_state.$": "$.failed_state",
        "error.$": "$.error",
    }
    assert record["Next"] == "TransitionFailed"
    assert _catch_all(record)["Next"] == "TransitionFailed"  # unrecorded, still FAILED
    assert states["TransitionFailed"]["Type"] == "Fail"


def test_a_notification_failure_never_fails_the_transition(template):
    states = definition(template)["States"]
    for name in NOTIFICATIONS:
        dropped = states[_catch_all(states[name])["Next"]]
        assert dropped["Type"] == "Pass" and dropped.get("End") is True, name


def test_lambda_errors_and_its_timeout_are_retried_by_every_lambda_task(template):
    states = definition(template)["States"]
    for name in LAMBDA_TASKS:
        retried = {e for r in states[name].get("Retry", []) for e in r["ErrorEquals"]}
        assert {
            "Sandbox.Timedout",
            "Lambda.Unknown",
            "Lambda.ServiceException",
            "Lambda.TooManyRequestsException",
            "VastUnavailable",
        } <= retried, name
        assert "States.ALL" not in retried, name  # a bug is not retried into the ground
