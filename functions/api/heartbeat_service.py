"""The agent heartbeat (docs/architecture.md#heartbeat): authenticate the generation's token,
decide, store, reply.

Authentication: the bearer token's sha256 must equal the hash on the generation item named by
the body (`job_id`, `generation`), compared in constant time. A valid token of a generation that
is no longer current gets `superseded` and lease 0, never a new lease. A current one gets a new
lease only while a monitor run recently completed its job's evaluation (`supervised_at`,
`functions.domain.job.decide_heartbeat`).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from functions.adapters.secrets import SecretStore
from functions.adapters.store import JobStore
from functions.domain.agent_token import hash_token
from functions.domain.checkpoint_record import (
    checkpoint_to_record,
    misplaced_event,
    restore_event,
    with_recorded,
)
from functions.domain.errors import FieldError, Invalid, Unauthenticated, field_errors
from functions.domain.health import gpu_busy
from functions.domain.heartbeat import HeartbeatReply, HeartbeatRequest, SecretValues
from functions.domain.job import (
    Generation,
    HeartbeatDecision,
    Job,
    TimelineEvent,
    decide_heartbeat,
    heartbeat_record,
)
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
from functions.settings import HeartbeatSettings

MAX_TOKEN_LENGTH = 256
# Compared against when no generation matches, so a miss costs the same as a wrong token.
_NO_HASH = "0" * 64


@dataclass(frozen=True)
class HeartbeatDeps:
    settings: HeartbeatSettings
    store: JobStore
    clock: Callable[[], float] = field(default=time.time)
    secrets: SecretStore = field(default_factory=SecretStore)


def bearer_token(headers: Mapping[str, str]) -> str:
    value = headers.get("authorization")
    if not value:
        raise _unauthorized("missing Authorization header")
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise _unauthorized("must be 'Bearer <agent token>'")
    if len(token) > MAX_TOKEN_LENGTH:
        raise _unauthorized("token too long")
    return token


def _unauthorized(reason: str) -> Unauthenticated:
    return Unauthenticated(
        "the agent token is missing or not valid for this job generation",
        [FieldError(path="header.authorization", reason=reason)],
    )


def parse_request(body: dict[str, Any]) -> HeartbeatRequest:
    try:
        return HeartbeatRequest.model_validate(body)
    except ValidationError as exc:
        raise Invalid("the heartbeat is not valid", field_errors(exc)) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise Invalid(
            "the heartbeat is not valid", [FieldError(path="body", reason=str(exc)[:200])]
        ) from None


@dataclass(frozen=True)
class HeartbeatMeasures:
    """What this heartbeat tells the dashboard (`functions/domain/measures.py`); None: nothing."""

    recovery_to_training_s: float | None = None
    checkpoint_upload_lag_s: float | None = None


@dataclass(frozen=True)
class HeartbeatOutcome:
    reply: HeartbeatReply
    decision: HeartbeatDecision
    measures: HeartbeatMeasures = field(default_factory=HeartbeatMeasures)


def handle_heartbeat(
    deps: HeartbeatDeps, request: HeartbeatRequest, token: str
) -> HeartbeatOutcome:
    now = deps.clock()
    token_hash = hash_token(token)
    job, generation = deps.store.load_heartbeat_context(request.job_id, request.generation)
    stored_hash = generation.token_hash if generation else _NO_HASH
    if not hmac.compare_digest(stored_hash, token_hash) or job is None or generation is None:
        raise _unauthorized("not the token of this job generation")
    decision = decide_heartbeat(
        job,
        generation,
        request,
        now=now,
        supervised_max_age_s=deps.settings.pulse_max_age_s,
    )
    measures = HeartbeatMeasures()
    secrets: SecretValues | None = None
    if decision.command != "superseded":
        first_training = is_first_training_heartbeat(generation, request)
        resumed = resumed_on_server(request, now)
        stored = deps.store.store_heartbeat(
            request.job_id,
            request.generation,
            token_hash=token_hash,
            heartbeat=heartbeat_record(request, now).model_copy(
                update={"outputs": outputs_to_record(job, generation, request)}
            ),
            lease_expires_at=decision.lease_expires_at,
            training_start_step=training_start_step(request) if first_training else None,
            gpu_busy=gpu_busy(request.gpu, job.spec.policy),
            resumed=resumed,
        )
        if stored:  # measured against the generation as it was before this heartbeat
            _record_checkpoint(deps, job, generation, request, token_hash)
            _report_restore(deps, generation, request, now)
            found = misplaced_event(generation.heartbeat, request, now)
            if found is not None:
                deps.store.append_event(found)
            _report_resumed(deps, job, generation, resumed, now)
            measures = HeartbeatMeasures(
                recovery_to_training_s=recovery_to_training_s(job, generation, resumed),
                checkpoint_upload_lag_s=checkpoint_upload_lag_s(generation, request, now),
            )
            if request.wants_secrets and decision.command == "continue":  # stored: still current
                secrets = _secret_values(deps, job)
        else:  # replaced between our read and our write
            decision = HeartbeatDecision(
                command="superseded",
                lease_expires_at=0.0,
                lease_renewed=False,
                reason="generation was replaced",
            )
    reply = HeartbeatReply(
        command=decision.command,
        lease_expires_at=decision.lease_expires_at,
        server_time=now,
        credentials=decision.credentials if decision.command != "superseded" else None,
        reason=decision.reason,
        secrets=secrets if decision.command != "superseded" else None,
    )
    return HeartbeatOutcome(reply=reply, decision=decision, measures=measures)


def _secret_values(deps: HeartbeatDeps, job: Job) -> SecretValues:
    """The values of the secrets the job's spec lists (and the names no longer stored), read
    for this reply only: never stored, logged or put on the timeline."""
    values, missing = deps.secrets.values(job.spec.secrets)
    return SecretValues(values=values, missing=missing)


def _record_checkpoint(
    deps: HeartbeatDeps,
    job: Job,
    generation: Generation,
    request: HeartbeatRequest,
    token_hash: str,
) -> None:
    """Add the checkpoint this heartbeat names to the job's record (`checkpoint_record.py`).
    Conditional on the generation still being current: a lost race records nothing now, and
    the next heartbeat, naming the same checkpoint, tries again."""
    ref = checkpoint_to_record(job, generation, request)
    if ref is None:
        return
    deps.store.record_checkpoints(
        job.job_id,
        generation.generation,
        token_hash=token_hash,
        checkpoints=with_recorded(
            job.recorded_checkpoints, ref, keep_per_generation=job.spec.checkpoint.keep_last
        ),
        previous_version=job.recorded_checkpoints_version,
    )


def _report_restore(
    deps: HeartbeatDeps, generation: Generation, request: HeartbeatRequest, now: float
) -> None:
    """The first heartbeat that says how the restore went puts it on the timeline when a
    candidate was skipped or none could be used."""
    already = generation.heartbeat is not None and generation.heartbeat.restore is not None
    found = None if already else restore_event(request, now)
    if found is not None:
        deps.store.append_event(found)


def _report_resumed(
    deps: HeartbeatDeps, job: Job, generation: Generation, resumed: Resumed | None, now: float
) -> None:
    """The heartbeat that first reports the generation's first step after its restore puts it
    on the timeline: the step resumed at, how long the process took to its first step, the time
    since the replace began, and (for a replacement) the work the fault lost, from the previous
    generation's last heartbeat (`functions/domain/recovery.py`)."""
    first_step_at = resumed.first_step_at if resumed is not None else None
    if generation.first_step_at is not None or resumed is None or first_step_at is None:
        return
    if generation.resumed_started_at is not None:  # as stored by an earlier heartbeat
        resumed = resumed.model_copy(update={"started_at": generation.resumed_started_at})
    lost = previous_step = since_incident = None
    data: dict[str, Any] = {
        "resumed_step": resumed.step,
        "first_step_after_start_s": resumed.first_step_after_start_s,
    }
    if generation.generation > 1:
        _, previous = deps.store.load_heartbeat_context(job.job_id, generation.generation - 1)
        previous_step, ended = last_known_step(previous.heartbeat if previous else None)
        lost = lost_work(previous_step, resumed.step, training_ended=ended)
        data.update(lost_steps=lost.steps, lost_steps_lower_bound=lost.lower_bound)
        if job.incident_at is not None and job.incident_generation == generation.generation - 1:
            since_incident = max(0.0, first_step_at - job.incident_at)
            data["recovery_s"] = since_incident
    deps.store.append_event(
        TimelineEvent(
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
    )
