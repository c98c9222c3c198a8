"""What one heartbeat does (pure): the one decision the heartbeat API takes.

The heartbeat API (`functions/api/heartbeat_service.py`) has the monitor's shape. It gathers the
facts (`HeartbeatFacts`: the job and the generation the agent's token authenticates, and the
generation before it when `previous_generation_needed`), asks `decide_heartbeat` once, and
applies the `HeartbeatDecision`: the conditional write of the heartbeat and the lease, then, only
if that write held, the checkpoint record, the timeline events and the user secrets of the reply.
A current generation told to continue whose heartbeat asks (`wants_job`) gets its job in the
reply (`job_bootstrap.py`); a superseded one, a stopped one or a wrong token gets nothing of it.

The lease (`decide_lease`, the dead-man switch; the rule is `lease.py`) is renewed only while
the generation's `supervised_at` is fresh: the time a monitor run last completed this job's
evaluation (read → decide → apply). A monitor that fails, or fails on this one job, writes
nothing there, so the host stops itself within its lease
(docs/architecture.md#heartbeat).

Everything is judged against the generation as it was read, before this heartbeat: which
restore report is new, which misplaced checkpoints are new, whether this heartbeat is the first
`training` one or the first to report a step after the restore.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.checkpoint_record import (
    checkpoint_to_record,
    misplaced_event,
    restore_event,
    unmarked_event,
    with_recorded,
)
from functions.domain.crashes import failure_event
from functions.domain.credentials import lease_within_credentials
from functions.domain.health import gpu_busy
from functions.domain.heartbeat_contract import (
    CheckpointRef,
    Command,
    HeartbeatReply,
    HeartbeatRequest,
    StorageCredentials,
)
from functions.domain.job import (
    Generation,
    Heartbeat,
    Job,
    JobState,
    TimelineEvent,
    is_terminal,
    known_spend_usd,
)
from functions.domain.job_bootstrap import job_bootstrap
from functions.domain.lease import lease_expires_at
from functions.domain.measures import (
    checkpoint_upload_lag_s,
    is_first_training_heartbeat,
    recovery_to_training_s,
    training_start_step,
)
from functions.domain.outputs_record import outputs_to_record
from functions.domain.recovery import (
    Resumed,
    last_known_step,
    lost_work,
    resumed_message,
    resumed_on_server,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- the lease ------------------------------------------------------------------------------


class LeaseDecision(BaseModel):
    """What the agent of an authenticated generation is told: its command, its lease, and the
    generation's storage credentials when they are newer than the ones it holds."""

    model_config = ConfigDict(frozen=True)

    command: Command
    lease_expires_at: float
    lease_renewed: bool
    credentials: StorageCredentials | None = None
    reason: str | None = None


# The answer to a heartbeat whose write was refused: its generation was replaced between the
# read and the write.
REPLACED_BEFORE_WRITE = LeaseDecision(
    command="superseded",
    lease_expires_at=0.0,
    lease_renewed=False,
    reason="generation was replaced",
)


def supervision_is_fresh(supervised_at: float | None, now: float, max_age_s: float) -> bool:
    """A monitor run completed this generation's evaluation within `max_age_s`."""
    return supervised_at is not None and now - supervised_at <= max_age_s


def is_current_generation(job: Job, generation: Generation) -> bool:
    """The generation is the job's current one (a token of any other gets `superseded`)."""
    return generation.is_current and generation.generation == job.current_generation


def decide_lease(
    job: Job,
    generation: Generation,
    request: HeartbeatRequest,
    *,
    now: float,
    supervised_max_age_s: float,
) -> LeaseDecision:
    """What the agent of an authenticated generation is told.

    The lease, and the storage credentials, are renewed only while the generation was
    supervised recently (`supervised_at`, written by a monitor run that completed this job's
    evaluation): with the monitor dead or failing on this job, the agent keeps its old expiry
    and stops the machine itself when it passes (invariant 4). A renewed lease never runs past
    what the generation's storage credentials allow: a host that could no longer save a
    checkpoint stops instead of training on (`credentials.py`).
    """
    if not is_current_generation(job, generation):
        return LeaseDecision(
            command="superseded",
            lease_expires_at=0.0,
            lease_renewed=False,
            reason=f"generation {generation.generation} was replaced "
            f"(current: {job.current_generation})",
        )
    renewed = supervision_is_fresh(generation.supervised_at, now, supervised_max_age_s)
    lease = generation.lease_expires_at
    if renewed:
        lease = lease_expires_at(
            now,
            lease_window_s=job.spec.policy.lease_window_s,
            budget_usd=job.budget_usd,
            # As this generation's last supervision measured it, never the job item's stepped
            # figure: with the supervisor dead, spend passes the cap by at most this lease.
            spent_usd=known_spend_usd(job, (generation,)),
            usd_per_hour=generation.usd_per_hour,
        )
        if generation.credentials is not None:
            lease = lease_within_credentials(lease, generation.credentials.expires_at, now)
    command: Command = "continue"
    reason = None if renewed else "supervisor silent: lease not renewed"
    if job.state == JobState.STOPPING or is_terminal(job.state):
        command = "stop"
        reason = f"job is {job.state.value.lower()}" + (
            f" ({job.stop_reason})" if job.stop_reason else ""
        )
    credentials = None
    if (
        renewed
        and generation.credentials is not None
        and (
            request.credentials_expire_at is None
            or generation.credentials.expires_at > request.credentials_expire_at
        )
    ):
        credentials = generation.credentials
    return LeaseDecision(
        command=command,
        lease_expires_at=lease,
        lease_renewed=renewed,
        credentials=credentials,
        reason=reason,
    )


# --- what is stored -------------------------------------------------------------------------


def heartbeat_record(
    request: HeartbeatRequest, now: float, received_at: float | None = None
) -> Heartbeat:
    return Heartbeat(
        at=now,
        agent_time=request.agent_time,
        received_at=received_at,
        phase=request.phase,
        step=request.step,
        total_steps=request.total_steps,
        gpu=request.gpu,
        last_checkpoint=request.last_checkpoint,
        restored_checkpoint=request.restored_checkpoint,
        restore=request.restore,
        misplaced_checkpoints=request.misplaced_checkpoints,
        unmarked_checkpoints=request.unmarked_checkpoints,
        resumed=request.resumed,
        outputs=request.outputs,
        exit_code=request.exit_code,
        exit_output=request.exit_output,
        bytes_downloaded=request.bytes_downloaded,
        bytes_uploaded=request.bytes_uploaded,
        last_upload_s=request.last_upload_s,
    )


class HeartbeatWrite(_Frozen):
    """The heartbeat and the lease, written onto the generation in one UpdateItem that holds
    only while the generation is current with this token (`JobStore.store_heartbeat`)."""

    heartbeat: Heartbeat
    lease_expires_at: float
    training_start_step: int | None = Field(
        default=None, description="Only with the generation's first `training` heartbeat."
    )
    gpu_busy: bool = Field(default=False, description="Moves `gpu_busy_at` to this heartbeat.")
    resumed: Resumed | None = Field(default=None, description="Each of its fields kept once.")


class CheckpointsWrite(_Frozen):
    """The job's recorded checkpoints with the one this heartbeat names added, written only
    while the generation is current with this token and the stored list is still version
    `previous_version` (`JobStore.record_checkpoints`): a lost race records nothing now, and the
    next heartbeat, naming the same checkpoint, tries again."""

    checkpoints: list[CheckpointRef]
    previous_version: int


class HeartbeatMeasures(_Frozen):
    """What this heartbeat tells the dashboard (`functions/domain/measures.py`); None: nothing."""

    recovery_to_training_s: float | None = None
    checkpoint_upload_lag_s: float | None = None


# --- the decision ---------------------------------------------------------------------------


class HeartbeatFacts(_Frozen):
    """What a heartbeat is decided on: the job and the generation its token authenticates, as
    read before this heartbeat, and the generation before that one (read only when
    `previous_generation_needed`; None also when it is not stored)."""

    job: Job
    generation: Generation
    request: HeartbeatRequest
    previous: Generation | None = None


class HeartbeatAnswer(_Frozen):
    """What goes back to the agent (`reply`, the wire form of `lease`, without the secrets'
    values) and the lease it is made of (for the metrics)."""

    lease: LeaseDecision
    reply: HeartbeatReply


class HeartbeatDecision(_Frozen):
    """What one heartbeat does, in the order it is applied.

    `write` None: nothing is stored (a superseded generation) and `answer` is the reply. Else
    `write` is conditional. Refused (the generation was replaced meanwhile), the agent gets
    `answer_if_replaced` and nothing more is done. Held, the checkpoint record is written, the
    events appended in order, and the agent gets `answer`, with the values of `secret_names`
    when those are given (read then, for this reply only: never stored, logged or put on the
    timeline); `measures` are emitted.
    """

    answer: HeartbeatAnswer
    answer_if_replaced: HeartbeatAnswer
    write: HeartbeatWrite | None = None
    checkpoints: CheckpointsWrite | None = None
    events: tuple[TimelineEvent, ...] = ()
    measures: HeartbeatMeasures = HeartbeatMeasures()
    secret_names: tuple[str, ...] | None = None


def answer_of(lease: LeaseDecision, now: float) -> HeartbeatAnswer:
    """The lease as the reply carries it: a superseded generation gets no credentials."""
    superseded = lease.command == "superseded"
    return HeartbeatAnswer(
        lease=lease,
        reply=HeartbeatReply(
            command=lease.command,
            lease_expires_at=lease.lease_expires_at,
            server_time=now,
            credentials=None if superseded else lease.credentials,
            reason=lease.reason,
        ),
    )


def previous_generation_needed(
    job: Job, generation: Generation, request: HeartbeatRequest, now: float
) -> bool:
    """This heartbeat is the one that puts the generation's resumption on the timeline, and the
    generation is a replacement: the work lost is measured from the one before it."""
    return (
        is_current_generation(job, generation)
        and generation.generation > 1
        and _resumption_due(generation, resumed_on_server(request, now))
    )


def decide_heartbeat(
    facts: HeartbeatFacts,
    *,
    now: float,
    supervised_max_age_s: float,
    received_at: float | None = None,
) -> HeartbeatDecision:
    """Everything an authenticated heartbeat does (the module docstring): the lease and the
    reply (`decide_lease`), the heartbeat record (stamped `received_at`: when API Gateway
    received it), the checkpoint record (`checkpoint_record.py`), the outputs record
    (`outputs_record.py`), the restore, misplaced, resumed and failure (`crashes.py`) timeline
    events, the measures, and whether the reply carries the secrets."""
    job, generation, request = facts.job, facts.generation, facts.request
    lease = decide_lease(
        job, generation, request, now=now, supervised_max_age_s=supervised_max_age_s
    )
    answer_if_replaced = answer_of(REPLACED_BEFORE_WRITE, now)
    if lease.command == "superseded":
        return HeartbeatDecision(
            answer=answer_of(lease, now), answer_if_replaced=answer_if_replaced
        )
    resumed = resumed_on_server(request, now)
    first_training = is_first_training_heartbeat(generation, request)
    write = HeartbeatWrite(
        heartbeat=heartbeat_record(request, now, received_at).model_copy(
            update={"outputs": outputs_to_record(job, generation, request)}
        ),
        lease_expires_at=lease.lease_expires_at,
        training_start_step=training_start_step(request) if first_training else None,
        gpu_busy=gpu_busy(request.gpu, job.spec.policy),
        resumed=resumed,
    )
    events = (
        _restore_event(generation, request, now),
        misplaced_event(generation.heartbeat, request, job.spec.checkpoint, now),
        unmarked_event(generation.heartbeat, request, job.spec.checkpoint, now),
        _resumed_event(facts, resumed, now),
        failure_event(generation.heartbeat, request, now),
    )
    wants_secrets = request.wants_secrets and lease.command == "continue"
    answer = answer_of(lease, now)
    if request.wants_job and lease.command == "continue":
        answer = answer.model_copy(
            update={
                "reply": answer.reply.model_copy(update={"job": job_bootstrap(job, generation)})
            }
        )
    return HeartbeatDecision(
        answer=answer,
        answer_if_replaced=answer_if_replaced,
        write=write,
        checkpoints=_checkpoints_write(job, generation, request),
        events=tuple(e for e in events if e is not None),
        measures=HeartbeatMeasures(
            recovery_to_training_s=recovery_to_training_s(job, generation, resumed),
            checkpoint_upload_lag_s=checkpoint_upload_lag_s(generation, request, now),
        ),
        secret_names=tuple(job.spec.secrets) if wants_secrets else None,
    )


def _checkpoints_write(
    job: Job, generation: Generation, request: HeartbeatRequest
) -> CheckpointsWrite | None:
    """The checkpoint this heartbeat names added to the job's record (`checkpoint_record.py`)."""
    ref = checkpoint_to_record(job, generation, request)
    if ref is None:
        return None
    return CheckpointsWrite(
        checkpoints=with_recorded(
            job.recorded_checkpoints, ref, keep_per_generation=job.spec.checkpoint.keep_last
        ),
        previous_version=job.recorded_checkpoints_version,
    )


def _restore_event(
    generation: Generation, request: HeartbeatRequest, now: float
) -> TimelineEvent | None:
    """The first heartbeat that says how the restore went puts it on the timeline when a
    candidate was skipped or none could be used."""
    already = generation.heartbeat is not None and generation.heartbeat.restore is not None
    return None if already else restore_event(request, now)


def _resumption_due(generation: Generation, resumed: Resumed | None) -> bool:
    """This heartbeat is the first to report the generation's first step after its restore."""
    return (
        generation.first_step_at is None
        and resumed is not None
        and resumed.first_step_at is not None
    )


def _resumed_event(
    facts: HeartbeatFacts, resumed: Resumed | None, now: float
) -> TimelineEvent | None:
    """The heartbeat that first reports the generation's first step after its restore puts it
    on the timeline: the step resumed at, how long the process took to its first step, the time
    since the replace began, and (for a replacement) the work the fault lost, from the previous
    generation's last heartbeat (`functions/domain/recovery.py`)."""
    job, generation = facts.job, facts.generation
    first_step_at = resumed.first_step_at if resumed is not None else None
    if generation.first_step_at is not None or resumed is None or first_step_at is None:
        return None
    if generation.resumed_started_at is not None:  # as stored by an earlier heartbeat
        resumed = resumed.model_copy(update={"started_at": generation.resumed_started_at})
    lost = previous_step = since_incident = None
    data: dict[str, Any] = {
        "resumed_step": resumed.step,
        "first_step_after_start_s": resumed.first_step_after_start_s,
    }
    if generation.generation > 1:
        previous = facts.previous
        previous_step, ended = last_known_step(previous.heartbeat if previous else None)
        lost = lost_work(previous_step, resumed.step, training_ended=ended)
        data.update(lost_steps=lost.steps, lost_steps_lower_bound=lost.lower_bound)
        if job.incident_at is not None and job.incident_generation == generation.generation - 1:
            since_incident = max(0.0, first_step_at - job.incident_at)
            data["recovery_s"] = since_incident
    return TimelineEvent(
        job_id=job.job_id,
        at=now,
        kind="resumed",
        message=resumed_message(
            generation.generation,
            resumed,
            since_incident_s=since_incident,
            lost=lost,
            previous_step=previous_step,
        ),
        data=data,
    )
