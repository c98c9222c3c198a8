"""The lifecycle task's contract: each step's input and output, the dependencies every step
gets, and the move of a job's state they share (`functions/lifecycle/service.py` runs them).

Inputs come from the state machine (`infra/constructs/lifecycle.py`); an input that does not
validate is the definition's mistake, never a user's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from functions.adapters.artifacts import Artifacts
from functions.adapters.cloudflare import CloudflareAccount, CloudflareClient
from functions.adapters.code_bucket import CodeBucket
from functions.adapters.notify import JobEvents
from functions.adapters.store import JobStore, StateConflict
from functions.adapters.vast import Listing, VastClient, describe_issues
from functions.domain.job import Job, JobState, StopReason, TimelineEvent, TransitionAction
from functions.domain.job_events import transition_event
from functions.observability import logger
from functions.settings import LifecycleSettings

RENTING = (JobState.PROVISIONING, JobState.REPLACING)
T = TypeVar("T")


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BeginInput(_Input):
    op: Literal["begin"]
    action: TransitionAction
    job_id: str
    generation: int = Field(ge=1)
    reason: str


class DestroyInput(_Input):
    op: Literal["destroy"]
    job_id: str
    below_generation: int | None = Field(
        default=None, ge=1, description="Destroy generations below this one; None: all."
    )


class ProvisionInput(_Input):
    op: Literal["provision"]
    job_id: str
    generation: int = Field(ge=1)
    waited_s: float = Field(default=0, ge=0, description="Back-off waited for capacity so far.")


class FailInput(_Input):
    op: Literal["fail"]
    job_id: str
    reason: str = ""


class AttemptFailedInput(_Input):
    """A Task of this execution failed for good (after its retries): its Catch."""

    op: Literal["attempt_failed"]
    job_id: str
    execution: str = Field(description="The execution's name, `<job>-<action>-g<n>-a<k>`.")
    failed_state: str = Field(description="The Task state that failed.")
    error: dict[str, Any] = Field(description="The Catch's Error and Cause.")


class StopBeginInput(_Input):
    op: Literal["stop_begin"]
    job_id: str
    reason: str


class FinishInput(_Input):
    op: Literal["finish"]
    job_id: str


LifecycleInput = Annotated[
    BeginInput
    | DestroyInput
    | ProvisionInput
    | FailInput
    | StopBeginInput
    | FinishInput
    | AttemptFailedInput,
    Field(discriminator="op"),
]


class StepOutput(BaseModel):
    proceed: bool = True
    outcome: str
    message: str = ""
    state: str | None = None


class ProvisionOutput(StepOutput):
    outcome: Literal["rented", "no_capacity", "over_budget", "rent_refused", "lost_race", "abandon"]
    waited_s: float = 0
    wait_s: int = 0
    timed_out: bool = False
    instance_id: int | None = None
    offer_id: int | None = None
    machine_id: int | None = None
    usd_per_hour: float | None = None
    field: str | None = None  # rent_refused: the argument Vast refuses


@dataclass(frozen=True)
class LifecycleDeps:
    settings: LifecycleSettings
    store: JobStore
    vast: Callable[[], VastClient]
    cloudflare: Callable[[], tuple[CloudflareClient, CloudflareAccount]]
    artifacts: Callable[[], Artifacts]
    account_secrets: Callable[[], list[str]]
    clock: Callable[[], float]
    events: JobEvents = field(default_factory=lambda: JobEvents(None))
    # The job code archives (`functions/adapters/code_bucket.py`); None: jobs ship no archive.
    code: Callable[[], CodeBucket] | None = None
    # Seconds left in this invocation (the handler reads Lambda's context); unbounded elsewhere.
    remaining_s: Callable[[], float] = field(default=lambda: math.inf)


def timeline_event(job_id: str, now: float, kind: str, message: str, **data: Any) -> TimelineEvent:
    """One entry of the job's timeline, at `now`."""
    return TimelineEvent(job_id=job_id, at=now, kind=kind, message=message, data=data)


def nothing_to_do(job: Job, why: str) -> StepOutput:
    """The step's answer when the job is no longer where this step acts: abandon, saying why."""
    return StepOutput(
        proceed=False,
        outcome="abandon",
        state=job.state.value,
        message=f"nothing to do: job is {job.state.value} ({why})",
    )


def transition_and_publish(
    deps: LifecycleDeps,
    job: Job,
    target: JobState,
    expected: Iterable[JobState],
    now: float,
    kind: str,
    message: str,
    *,
    state_reason: str | None = None,
    stop_reason: StopReason | None = None,
    restarts: int | None = None,
) -> Job:
    """Move the job if it still is where we think, and publish the move; else return it as
    found (someone else — a cancel, another execution — moved it; the caller decides from its
    state)."""
    try:
        moved = deps.store.transition_job(
            job.job_id,
            target,
            expected=expected,
            now=now,
            event=timeline_event(job.job_id, now, kind, message),
            state_reason=state_reason,
            stop_reason=stop_reason,
            restarts=restarts,
        )
    except StateConflict as exc:
        return exc.job if exc.job is not None else job
    deps.events.publish(transition_event(moved, reason=message, at=now))
    return moved


def logged_listing(listing: Listing[T], what: str) -> Listing[T]:
    """A Vast listing, after one warning naming the records it could not read (never fatal)."""
    if listing.issues:
        logger.warning(
            "lifecycle: %s: Vast records that could not be read: %s",
            what,
            describe_issues(listing.issues),
        )
    return listing
