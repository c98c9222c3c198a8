"""The monitor's repair of lifecycle transitions: start the attempt a transition waits for.

Every transition the monitor's decision names (`JobDecision.transition`: a verdict's replace or
stop, or the transition a PENDING, PROVISIONING, REPLACING or STOPPING job is in the middle of)
goes through `advance`. It walks the transition's attempts in order, asking Step Functions how
each one's execution stands, and `functions.domain.attempts.next_step` says what to do: start
the first attempt that does not exist yet, once every one before it closed FAILED, TIMED_OUT or
ABORTED; nothing while one is running or after one succeeded. Past the action's cap, a provision
or replace is given up and the job stopped as failed (that stop has attempts of its own); a stop
that reaches its cap is left to the orphan sweep, which keeps destroying a stopping job's
instances, and is counted (`TransitionsExhausted`) for an alarm.

Exactly once: two overlapping runs walk the same chain to the same attempt and start the same
execution name; Step Functions lets one of them start it (`TransitionStarter.start` is False for
the other). Only the run that started an attempt writes its timeline event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.domain.attempts import MAX_ATTEMPTS, give_up, next_step
from functions.domain.job import TimelineEvent, TransitionRequest
from functions.observability import logger

RepairStatus = Literal["started", "already_started", "under_way", "done", "exhausted"]


@dataclass(frozen=True)
class RepairOutcome:
    status: RepairStatus
    request: TransitionRequest  # the attempt started, found under way or done, or the last one
    gave_up: TransitionRequest | None = None  # the transition given up for `request` (a stop)

    @property
    def started_first_attempt(self) -> bool:
        """This run started the transition the decision asked for, for the first time."""
        return self.status == "started" and self.request.attempt == 1 and self.gave_up is None

    @property
    def retried(self) -> bool:
        """This run started a later attempt, or the stop that replaces a given-up transition."""
        return self.status == "started" and not self.started_first_attempt


def advance(
    transitions: TransitionStarter, store: JobStore, request: TransitionRequest, *, now: float
) -> RepairOutcome:
    """Start the attempt of `request`'s transition that is due, if one is (module docstring)."""
    outcome = _walk(transitions, request)
    if outcome.status == "exhausted" and outcome.gave_up is None:
        fallback = give_up(request, outcome.request.attempt)
        if fallback is None:
            logger.error(
                "monitor: transition gave up",
                extra={"job_id": request.job_id, "execution": outcome.request.execution_name},
            )
            return outcome
        outcome = _walk(transitions, fallback)
        outcome = RepairOutcome(outcome.status, outcome.request, gave_up=request)
    if outcome.status == "started" and not outcome.started_first_attempt:
        store.append_event(_retried_event(outcome, now))
    return outcome


def _walk(transitions: TransitionStarter, request: TransitionRequest) -> RepairOutcome:
    attempt = 1
    while True:
        current = request.with_attempt(attempt)
        step = next_step(request, attempt, transitions.status(current))
        if step.kind == "look_further":
            attempt = step.attempt
            continue
        if step.kind == "start":
            started = transitions.start(current)
            return RepairOutcome("started" if started else "already_started", current)
        if step.kind == "give_up":
            return RepairOutcome("exhausted", current)
        return RepairOutcome("done" if step.kind == "done" else "under_way", current)


def _retried_event(outcome: RepairOutcome, now: float) -> TimelineEvent:
    started = outcome.request
    if outcome.gave_up is not None:
        message = (
            f"gave up on {outcome.gave_up.action} after {MAX_ATTEMPTS[outcome.gave_up.action]} "
            f"failed attempts; stopping the job as failed ({started.execution_name})"
        )
        kind = "transition_abandoned"
    else:
        message = (
            f"{started.action} attempt {started.attempt} started: attempt "
            f"{started.attempt - 1} did not finish ({started.execution_name})"
        )
        kind = "transition_retried"
    return TimelineEvent(
        job_id=started.job_id,
        at=now,
        kind=kind,
        message=message,
        data={"execution": started.execution_name, "attempt": started.attempt},
    )
