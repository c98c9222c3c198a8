"""Attempts of a lifecycle transition, and when to start the next one (pure, no I/O).

A transition — provision generation 1, replace towards generation n, stop — runs as executions
of the lifecycle state machine named `<job>-<action>-g<n>-a<k>` (`<job>-stop-a<k>`,
`functions.domain.job.execution_name`). Every Task state of the machine catches every error
into a failure path that records why on the job's timeline and ends the execution FAILED
(`infra/constructs/lifecycle.py`), so a transition that could not finish always closes; the
monitor then starts its next attempt (`functions/monitor/repair.py`).

Which attempt to start is decided from facts every monitor run can read alike: whether the
executions of attempts 1, 2, … exist, and how each ended. Walking them in order:

- an attempt that does not exist → start it (attempt 1 too: a start that was lost, say by an
  API that died between storing the job and starting its provision, is repaired the same way);
- one that is RUNNING (or waiting for a redrive) → it is under way; nothing to do;
- one that SUCCEEDED → the transition is done; nothing to do;
- one that closed FAILED, TIMED_OUT or ABORTED → look at the next attempt, up to the action's
  cap (`MAX_ATTEMPTS`); past it, give up (`give_up`).

Two overlapping monitor runs walk the same chain and reach the same attempt, whose execution
name is deterministic: one start wins, the other gets ExecutionAlreadyExists (each start's input
carries its own request id, `functions/adapters/transitions.py`). An attempt is started only
once every attempt before it has closed, so two attempts of one transition never run at once.

What a job in the middle of a transition is waiting for (`transition_under_way`) comes from its
state alone: PENDING and PROVISIONING wait for their provision, REPLACING for the replace of
its current generation, STOPPING for its stop. While those attempts fail, the instances the
transition would destroy are swept by the monitor (`doomed_instance_reason`), so no money goes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.job import (
    MAX_ATTEMPT_NUMBER,
    Job,
    JobState,
    TransitionAction,
    TransitionRequest,
)

ExecutionStatus = Literal[
    "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE"
]
# How an attempt closes when it could not finish its transition.
CLOSED_UNFINISHED: frozenset[str] = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})

# Attempts of one transition before the monitor gives up on it. Under a Vast outage one attempt
# lasts about 45 min (DestroyAll's retries) and the monitor starts the next at its next run, so
# 20 stop attempts keep trying for about 15 h; the orphan sweep destroys a stopping job's
# instances meanwhile (functions/domain/reconcile.py), so no money goes while they try.
# A provision or replace that fails 5 times is given up: the job is stopped as failed.
MAX_ATTEMPTS: dict[TransitionAction, int] = {"provision": 5, "replace": 5, "stop": 20}
assert max(MAX_ATTEMPTS.values()) <= MAX_ATTEMPT_NUMBER


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttemptStep(_Frozen):
    """What to do after looking at one attempt's execution."""

    kind: Literal["start", "look_further", "under_way", "done", "give_up"]
    attempt: int


def next_step(
    request: TransitionRequest, attempt: int, status: ExecutionStatus | str | None
) -> AttemptStep:
    """Attempt `attempt` of `request`'s transition has `status` (None: no such execution)."""
    if status is None:
        return AttemptStep(kind="start", attempt=attempt)
    if status == "SUCCEEDED":
        return AttemptStep(kind="done", attempt=attempt)
    if status not in CLOSED_UNFINISHED:
        return AttemptStep(kind="under_way", attempt=attempt)  # RUNNING, PENDING_REDRIVE
    if attempt >= MAX_ATTEMPTS[request.action]:
        return AttemptStep(kind="give_up", attempt=attempt)
    return AttemptStep(kind="look_further", attempt=attempt + 1)


def give_up(request: TransitionRequest, attempts: int) -> TransitionRequest | None:
    """After `attempts` attempts of `request` closed unfinished: a provision or replace that
    cannot get the job a host stops it as failed (its stop destroys whatever was rented);
    a stop has nothing further to fall back on (None: the monitor raises the alarm, and its
    orphan sweep keeps destroying the job's instances)."""
    if request.action == "stop":
        return None
    what = f"{request.action} of generation {request.generation}"
    return TransitionRequest(
        action="stop",
        job_id=request.job_id,
        generation=max(0, request.generation - 1),
        reason=f"failed: {what} failed {attempts} times (see the job's timeline)",
    )


def transition_under_way(job: Job) -> TransitionRequest | None:
    """The transition a job in the middle of one is waiting for (None: RUNNING or ended)."""
    if job.state in (JobState.PENDING, JobState.PROVISIONING):
        return TransitionRequest(
            action="provision",
            job_id=job.job_id,
            generation=job.current_generation + 1,
            reason="submitted",
        )
    if job.state == JobState.REPLACING:
        # The reason its first attempt moved it with (the lifecycle's begin keeps it as the
        # state reason): a later attempt blames the host, or counts a restart, alike.
        return TransitionRequest(
            action="replace",
            job_id=job.job_id,
            generation=job.current_generation + 1,
            reason=job.state_reason or "replacing",
        )
    if job.state == JobState.STOPPING:
        return TransitionRequest(
            action="stop",
            job_id=job.job_id,
            generation=job.current_generation,
            reason=job.stop_reason or "cancelled",
        )
    return None


def doomed_instance_reason(job: Job, generation: int, *, now: float, grace_s: float) -> str | None:
    """Why an instance of the job's `generation` that is otherwise live should be gone by now:
    the job has been STOPPING, or REPLACING that generation, for at least `grace_s` — its
    transition destroys it first; this is for when that transition's attempts keep failing.
    None: leave it. How long the job has been in its state counts from its last move
    (`updated_at`, which only a move of the job's state stamps)."""
    waited = max(0.0, now - job.updated_at)
    if waited < grace_s:
        return None
    if job.state == JobState.STOPPING:
        return f"its job has been stopping for {waited:.0f} s"
    if job.state == JobState.REPLACING and generation <= job.current_generation:
        return f"its job has been replacing generation {generation} for {waited:.0f} s"
    return None
