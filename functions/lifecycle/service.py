"""The lifecycle's task steps, apart from Lambda: each takes a typed input and its adapters.

The state machine (`infra/constructs/lifecycle.py`) runs them in this order:

- provision / replace: `begin` → (replace: `destroy` the older generations) → `provision`
  (`functions/lifecycle/provision.py`: plan, rent, record) → notify; no capacity → Wait and
  `provision` again until the provision timeout → `fail`.
- stop: `stop_begin` → `destroy` every instance of the job → `finish` → notify.
- any step that fails after its retries: `attempt_failed` records which and why on the job's
  timeline; the execution ends FAILED and the monitor starts the transition's next attempt.

Every step is idempotent: Step Functions may run a task twice (Retry after a timeout), and an
attempt of a transition carries on from wherever a failed one left the job. The inputs, outputs
and dependencies are `functions/lifecycle/steps.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from functions.domain.health import BLAMES_HOST, Health
from functions.domain.job import (
    TERMINAL_STATE_FOR,
    Generation,
    GenerationStatus,
    Job,
    JobState,
    is_terminal,
    known_spend_usd,
)
from functions.domain.labels import job_label_ranges, parse_label
from functions.domain.pace import pace_sample, startup_sample
from functions.domain.reasons import reason_health, stop_reason_for
from functions.lifecycle.provision import provision
from functions.lifecycle.steps import (
    RENTING,
    AttemptFailedInput,
    BeginInput,
    DestroyInput,
    FailInput,
    FinishInput,
    LifecycleDeps,
    ProvisionInput,
    StepOutput,
    StopBeginInput,
    logged_listing,
    nothing_to_do,
    timeline_event,
    transition_and_publish,
)


class InstancesStillPresent(Exception):
    """Vast still lists instances we destroyed: the state machine retries the destroy."""


# --- begin ----------------------------------------------------------------------------------


def begin(deps: LifecycleDeps, inp: BeginInput) -> StepOutput:
    """Claim the job for this transition: PENDING → PROVISIONING, RUNNING → REPLACING (the
    old generation is superseded, so its agent stops at its next heartbeat; it ends when
    `destroy` has seen its instance gone)."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    previous = inp.generation - 1
    if job.current_generation != previous:
        return nothing_to_do(job, f"generation {inp.generation} is not next")
    if inp.action == "provision":
        if job.state == JobState.PENDING:
            job = transition_and_publish(
                deps, job, JobState.PROVISIONING, (JobState.PENDING,), now, "provisioning",
                f"looking for a host: {inp.reason}",
            )  # fmt: skip
        if job.state != JobState.PROVISIONING:
            return nothing_to_do(job, "not pending")
        place_code(deps, job)
        return StepOutput(outcome="begun", state=job.state.value)
    if job.state == JobState.RUNNING:
        crashed = reason_health(inp.reason) is Health.CRASHED
        job = transition_and_publish(
            deps, job, JobState.REPLACING, (JobState.RUNNING,), now, "replacing",
            f"replacing generation {previous}: {inp.reason}", state_reason=inp.reason,
            restarts=job.restarts + 1 if crashed else None,
        )  # fmt: skip
    if job.state != JobState.REPLACING:
        return nothing_to_do(job, "not running")
    # Not ended yet: the generation ends when DestroyPrevious has seen its instance gone.
    # Until then it may still finish a checkpoint upload, which is then a checkpoint of a
    # generation that existed, and restorable (invariant 2).
    blamed = reason_health(inp.reason) in BLAMES_HOST
    deps.store.supersede_generation(job.job_id, previous, host_blamed=blamed)
    place_code(deps, job)
    return StepOutput(outcome="begun", state=job.state.value)


def place_code(deps: LifecycleDeps, job: Job) -> None:
    """Copy the job's code archive (spec `code.archive`, checked at submit) from its upload
    `code/<sha256>.tar.gz` to `jobs/<job_id>/code/<sha256>.tar.gz`, where every generation's
    read-only key reads it; nothing when the copy is there already. Here, not at submit: the
    job exists before anything is written under its prefix (a submit that dies halfway leaves
    no copy behind), and every provision and replace repairs a copy that is missing. The
    upload is never deleted, so a failed attempt loses nothing; `ArchiveMissing` (the upload
    deleted since) or its kind `ArchiveChanged` (the copy does not hash to the archive's sha256:
    the upload was overwritten since, and the copy is deleted) fails the step, and the attempt
    is recorded on the timeline."""
    archive = job.spec.code.archive if job.spec.code else None
    if archive is None or deps.code is None:
        return
    deps.code().copy_to_job(archive.sha256, job.job_id, archive.size_bytes)


# --- destroy --------------------------------------------------------------------------------


def destroy(deps: LifecycleDeps, inp: DestroyInput) -> StepOutput:
    """Destroy the job's instances (all, or those of generations below `below_generation`):
    every instance Vast lists with the job's label and every instance id recorded on those
    generations. Raises InstancesStillPresent while Vast still lists one (Retry)."""
    vast = deps.vast()
    now = deps.clock()

    def doomed(label: str | None) -> bool:
        parsed = parse_label(label)
        if parsed is None or parsed[0] != inp.job_id:
            return False
        return inp.below_generation is None or parsed[1] < inp.below_generation

    generations = [
        g
        for g in deps.store.list_generations(inp.job_id)
        if inp.below_generation is None or g.generation < inp.below_generation
    ]
    labelled = [
        i
        for label_range in job_label_ranges(inp.job_id)  # the job's labels, not the account's
        for i in logged_listing(vast.list_instances(label_range=label_range), "destroy")
    ]
    targets = {i.id for i in labelled if doomed(i.label)}
    targets |= {g.instance_id for g in generations if g.instance_id is not None}
    for instance_id in sorted(targets):
        vast.destroy_instance(instance_id)  # idempotent: gone counts as done
    remaining = sorted(i for i in targets if vast.show_instance(i) is not None)
    if remaining:
        raise InstancesStillPresent(f"Vast still lists instances {remaining}; retrying")
    ending = [g for g in generations if g.ended_at is None or g.status not in _ENDED]
    job = deps.store.get_job(inp.job_id) if ending else None
    for g in ending:
        if job is not None:
            _learn_from(deps, job, g)  # before it ends: a retried destroy still learns, once
        deps.store.end_generation(
            inp.job_id, g.generation, ended_at=g.ended_at or now, status=_ended_status(g)
        )
    if targets:
        deps.store.append_event(
            timeline_event(
                inp.job_id, now, "destroyed", f"destroyed instances {sorted(targets)}",
                instance_ids=sorted(targets),
            )
        )  # fmt: skip
    return StepOutput(outcome="destroyed", message=f"{len(targets)} instance(s) destroyed")


_ENDED = ("superseded", "stopped", "failed")


def _learn_from(deps: LifecycleDeps, job: Job, generation: Generation) -> None:
    """File the ending generation's pace and start-up under its job's name
    (`functions/domain/pace.py`): here, before a replace provisions, so the replacement and
    later jobs of the name are priced with them."""
    pace = pace_sample(generation)
    if pace is not None:
        deps.store.record_pace(job.name, pace)
    startup = startup_sample(generation, job.spec)
    if startup is not None:
        deps.store.record_startup(job.name, startup)


def _ended_status(generation: Generation) -> GenerationStatus:
    return "superseded" if not generation.is_current else "stopped"


# --- fail / stop ----------------------------------------------------------------------------


def fail(deps: LifecycleDeps, inp: FailInput) -> StepOutput:
    """The transition could not get the job a host: FAILED with the reason."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    reason = inp.reason or "provisioning failed"
    job = transition_and_publish(
        deps, job, JobState.FAILED, (JobState.PENDING, *RENTING), now, "failed", reason,
        stop_reason="failed", state_reason=reason,
    )  # fmt: skip
    return StepOutput(
        outcome="failed", state=job.state.value, message=f"job {job.job_id} FAILED: {reason}"
    )


def stop_begin(deps: LifecycleDeps, inp: StopBeginInput) -> StepOutput:
    """Any active job → STOPPING with the reason's outcome (a cancel has set it already)."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    if is_terminal(job.state):
        return nothing_to_do(job, "already ended")
    if job.state != JobState.STOPPING:
        stop_reason = stop_reason_for(inp.reason)
        job = transition_and_publish(
            deps, job, JobState.STOPPING,
            (JobState.PENDING, JobState.PROVISIONING, JobState.RUNNING, JobState.REPLACING),
            now, "stopping", f"stopping: {inp.reason}",
            stop_reason=stop_reason, state_reason=inp.reason,
        )  # fmt: skip
    if job.state != JobState.STOPPING:
        return nothing_to_do(job, "already ended")
    return StepOutput(outcome="stopping", state=job.state.value)


def finish(deps: LifecycleDeps, inp: FinishInput) -> StepOutput:
    """STOPPING → the terminal state its stop reason names."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    if job.state == JobState.STOPPING:
        target = TERMINAL_STATE_FOR[job.stop_reason or "cancelled"]
        job = transition_and_publish(
            deps, job, target, (JobState.STOPPING,), now, target.value.lower(),
            f"job ended {target.value}: {job.state_reason or job.stop_reason}",
        )  # fmt: skip
    # The monitor keeps the exact spend on the generations and the job item's in steps: the
    # ended job's item gets the exact figure (what lists show from now on), only upwards.
    spent_usd = known_spend_usd(job, deps.store.list_generations(job.job_id))
    if spent_usd > job.spent_usd:
        deps.store.record_spend(job.job_id, spent_usd)
    spent = f"${spent_usd:.2f} of ${job.budget_usd:.2f}"
    return StepOutput(
        outcome="finished",
        state=job.state.value,
        message=f"job {job.job_id} ({job.name}) is {job.state.value}: "
        f"{job.state_reason or job.stop_reason or ''}; spent {spent}",
    )


# --- a failed attempt ---------------------------------------------------------------------

CAUSE_CHARS = 500


def attempt_failed(deps: LifecycleDeps, inp: AttemptFailedInput) -> StepOutput:
    """A step of this execution failed for good: say which and why on the job's timeline. The
    execution then ends FAILED, and the monitor starts the transition's next attempt
    (`functions/monitor/repair.py`); the job keeps its state meanwhile."""
    error, cause = describe_error(inp.error)
    message = f"{inp.execution} failed in {inp.failed_state}: {error}: {cause}"
    deps.store.append_event(
        timeline_event(
            inp.job_id, deps.clock(), "transition_failed", message,
            execution=inp.execution, state=inp.failed_state, error=error,
        )
    )  # fmt: skip
    return StepOutput(proceed=False, outcome="attempt_failed", message=message)


def describe_error(error: dict[str, Any]) -> tuple[str, str]:
    """A Catch's `Error` and a readable `Cause`: a Lambda error's cause is the function's error
    document (JSON with `errorMessage`), shortened to its message."""
    name = str(error.get("Error") or "error")
    cause = str(error.get("Cause") or "")
    try:
        document = json.loads(cause)
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("errorMessage"):
        cause = str(document["errorMessage"])
    return name, cause[:CAUSE_CHARS]


def run_step(deps: LifecycleDeps, inp: Any) -> StepOutput:
    steps: dict[type[Any], Callable[[LifecycleDeps, Any], StepOutput]] = {
        BeginInput: begin,
        DestroyInput: destroy,
        ProvisionInput: provision,
        FailInput: fail,
        StopBeginInput: stop_begin,
        FinishInput: finish,
        AttemptFailedInput: attempt_failed,
    }
    return steps[type(inp)](deps, inp)
