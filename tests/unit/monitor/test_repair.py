"""The monitor's repair (functions/monitor/repair.py) against a Step Functions that keeps its
executions by name, as the real one does: which attempt a run starts, what it records, and that
overlapping runs start each attempt once."""

from __future__ import annotations

from typing import Any, cast

from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.domain.job import TimelineEvent, TransitionRequest
from functions.monitor import repair

NOW = 1_800_000_000.0


class Executions:
    """Executions by name; a start of a taken name is refused (ExecutionAlreadyExists)."""

    def __init__(self, **statuses: str) -> None:
        self.statuses: dict[str, str] = {k.replace("_", "-"): v for k, v in statuses.items()}
        self.started: list[str] = []
        self.described: list[str] = []

    def status(self, request: TransitionRequest) -> str | None:
        self.described.append(request.execution_name)
        return self.statuses.get(request.execution_name)

    def start(self, request: TransitionRequest) -> bool:
        if request.execution_name in self.statuses:
            return False
        self.statuses[request.execution_name] = "RUNNING"
        self.started.append(request.execution_name)
        return True


class Events:
    def __init__(self) -> None:
        self.events: list[TimelineEvent] = []

    def append_event(self, event: TimelineEvent) -> None:
        self.events.append(event)


def advance(executions: Executions, events: Events, request: TransitionRequest) -> Any:
    return repair.advance(
        cast(TransitionStarter, executions), cast(JobStore, events), request, now=NOW
    )


def stop() -> TransitionRequest:
    return TransitionRequest(action="stop", job_id="j-1", generation=1, reason="cancelled")


def replace() -> TransitionRequest:
    return TransitionRequest(
        action="replace", job_id="j-1", generation=2, reason="dead: heartbeat 400 s old"
    )


def failed(prefix: str, attempts: range, status: str = "FAILED") -> dict[str, str]:
    return {f"{prefix}_a{k}": status for k in attempts}


def test_a_new_transition_starts_its_first_attempt_and_records_nothing_itself() -> None:
    executions, events = Executions(), Events()
    outcome = advance(executions, events, replace())
    assert outcome.status == "started" and outcome.started_first_attempt
    assert not outcome.retried
    assert executions.started == ["j-1-replace-g2-a1"] and events.events == []


def test_an_attempt_under_way_or_done_is_left_alone() -> None:
    for status, expected in (("RUNNING", "under_way"), ("SUCCEEDED", "done")):
        executions, events = Executions(j_1_stop_a1="FAILED", j_1_stop_a2=status), Events()
        outcome = advance(executions, events, stop())
        assert outcome.status == expected and outcome.request.attempt == 2
        assert executions.started == [] and events.events == []


def test_after_a_failed_attempt_the_next_one_starts_and_says_so_on_the_timeline() -> None:
    executions = Executions(j_1_stop_a1="FAILED", j_1_stop_a2="TIMED_OUT", j_1_stop_a3="ABORTED")
    events = Events()
    outcome = advance(executions, events, stop())
    assert outcome.status == "started" and outcome.retried and not outcome.started_first_attempt
    assert executions.started == ["j-1-stop-a4"]
    assert executions.described == ["j-1-stop-a1", "j-1-stop-a2", "j-1-stop-a3", "j-1-stop-a4"]
    (event,) = events.events
    assert event.kind == "transition_retried" and event.job_id == "j-1" and event.at == NOW
    assert event.message == "stop attempt 4 started: attempt 3 did not finish (j-1-stop-a4)"
    assert event.data == {"execution": "j-1-stop-a4", "attempt": 4}


def test_overlapping_runs_start_each_attempt_once() -> None:
    """Both runs read attempt 1 failed and attempt 2 absent; Step Functions lets one start it."""
    executions = Executions(j_1_stop_a1="FAILED")
    read_by_the_slower_run = dict(executions.statuses)

    class SlowerRun(Executions):
        def status(self, request: TransitionRequest) -> str | None:
            return read_by_the_slower_run.get(request.execution_name)

        def start(self, request: TransitionRequest) -> bool:
            return executions.start(request)

    first = advance(executions, Events(), stop())
    events = Events()
    second = advance(SlowerRun(), events, stop())
    assert first.status == "started" and second.status == "already_started"
    assert not second.retried and not second.started_first_attempt
    assert executions.started == ["j-1-stop-a2"] and events.events == []


def test_a_replace_failed_five_times_is_given_up_for_a_stop_as_failed() -> None:
    executions, events = Executions(**failed("j_1_replace_g2", range(1, 6))), Events()
    outcome = advance(executions, events, replace())
    assert outcome.status == "started" and outcome.retried
    assert outcome.gave_up == replace() and outcome.request.action == "stop"
    assert outcome.request.reason.startswith("failed: replace of generation 2 failed 5 times")
    assert executions.started == ["j-1-stop-a1"]
    (event,) = events.events
    assert event.kind == "transition_abandoned"
    assert event.message == (
        "gave up on replace after 5 failed attempts; stopping the job as failed (j-1-stop-a1)"
    )


def test_the_stop_of_a_given_up_transition_has_attempts_of_its_own() -> None:
    statuses = {**failed("j_1_replace_g2", range(1, 6)), "j_1_stop_a1": "FAILED"}
    executions, events = Executions(**statuses), Events()
    outcome = advance(executions, events, replace())
    assert outcome.request.execution_name == "j-1-stop-a2" and outcome.status == "started"


def test_a_stop_past_its_last_attempt_starts_nothing() -> None:
    executions, events = Executions(**failed("j_1_stop", range(1, 21))), Events()
    outcome = advance(executions, events, stop())
    assert outcome.status == "exhausted" and outcome.request.attempt == 20
    assert executions.started == [] and events.events == []
