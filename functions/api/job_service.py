"""What the job API does, apart from HTTP: submit, list, get, cancel, and the measures learned
per job name.

The handler (`functions/api/jobs.py`) parses the request into domain types (a submission, a
state filter) and maps results to responses; everything here takes those typed values and the
adapters it needs, and says what went wrong with the domain's errors
(`functions/domain/errors.py`), which `functions/api/http.py` maps to statuses.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.code_bucket import CodeBucket
from functions.adapters.notify import JobEvents
from functions.adapters.secrets import SecretStore
from functions.adapters.store import IdempotencyConflict, JobStore, JobView, StateConflict
from functions.adapters.table import BadPageToken
from functions.adapters.transitions import TransitionStarter
from functions.api import code_service
from functions.domain.crashes import last_failure
from functions.domain.errors import Conflict, FieldError, Invalid, NotFound
from functions.domain.job import (
    ACTIVE_STATES,
    Generation,
    Job,
    JobState,
    TimelineEvent,
    TransitionRequest,
    cancel_outcome,
    new_job,
    new_job_id,
    with_known_spend,
)
from functions.domain.job_events import submission_event, transition_event
from functions.domain.job_status import (
    current_reason,
    host_state,
    last_error,
    last_transition,
    progress,
)
from functions.domain.pace import measures_json
from functions.domain.submission import JobSubmission
from functions.settings import JobsApiSettings

IDEMPOTENCY_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
JOB_ID_SHAPE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TIMELINE_LENGTH = 100


@dataclass(frozen=True)
class JobsDeps:
    settings: JobsApiSettings
    store: JobStore
    transitions: TransitionStarter
    clock: Callable[[], float] = field(default=time.time)
    events: JobEvents = field(default_factory=lambda: JobEvents(None))
    secrets: SecretStore = field(default_factory=SecretStore)
    # Code archives in R2 (`code_service`); built on first use, None: not configured.
    code: Callable[[], CodeBucket | None] = field(default=lambda: None)


# --- submit -------------------------------------------------------------------------------


def _require_secrets(deps: JobsDeps, names: list[str]) -> None:
    """Every secret the spec lists must be stored already: refused (400) naming the missing
    ones, nothing stored."""
    missing = deps.secrets.missing(names)
    if missing:
        raise Invalid(
            f"the job needs secrets that are not stored: {', '.join(missing)} "
            f"(store each with `tether secrets set NAME`)",
            [
                FieldError(path=f"secrets[{names.index(n)}]", reason=f"{n} is not stored")
                for n in missing
            ],
        )


def validate_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not IDEMPOTENCY_KEY_PATTERN.match(key):
        raise Invalid(
            "the Idempotency-Key header is not usable",
            [
                FieldError(
                    path="header.idempotency-key",
                    reason="must be 1–128 characters of letters, digits, _ . : -",
                )
            ],
        )
    return key


def submit_job(
    deps: JobsDeps, submission: JobSubmission, *, identity: str, idempotency_key: str | None
) -> tuple[dict[str, Any], bool]:
    """Store a PENDING job and start its provision transition. Returns (job view, created).
    The Idempotency-Key is checked after the spec's secrets and code, as it always was."""
    spec = submission.spec
    _require_secrets(deps, spec.secrets)
    code_service.verify_archive(deps.code, spec)  # before anything is stored
    now = deps.clock()
    job, event = new_job(spec, job_id=new_job_id(spec.name), now=now, submitted_by=identity)
    key = validate_idempotency_key(idempotency_key)
    try:
        stored, created = deps.store.create_job(
            job,
            event,
            idempotency=(key, submission.request_sha256) if key else None,
            idempotency_expires_at=now + deps.settings.idempotency_ttl_s,
        )
    except IdempotencyConflict as exc:
        raise Conflict(
            f"Idempotency-Key was already used for job {exc.job_id} with a different job spec",
            [FieldError(path="header.idempotency-key", reason="reused with a different body")],
        ) from None
    if created:
        deps.events.publish(submission_event(stored, reason=event.message))
    if stored.state == JobState.PENDING:
        # Also on a replay: the first attempt may have stored the job and died before this.
        deps.transitions.start(
            TransitionRequest(
                action="provision", job_id=stored.job_id, generation=1, reason="submitted"
            )
        )
    view = deps.store.get_job_view(stored.job_id, max_events=TIMELINE_LENGTH)
    return job_detail(view if view else JobView(job=stored), deps.clock()), created


# --- list / get ---------------------------------------------------------------------------


def parse_state_filter(state: str | None) -> JobState | None:
    """`GET /jobs?state=`: a job state, any case; 400 naming `query.state` for anything else."""
    if state is None:
        return None
    try:
        return JobState(state.upper())
    except ValueError:
        raise Invalid(
            "unknown state",
            [
                FieldError(
                    path="query.state", reason=f"must be one of {[s.value for s in JobState]}"
                )
            ],
        ) from None


def list_jobs(
    deps: JobsDeps, *, state: JobState | None, limit: int, next_token: str | None
) -> dict[str, Any]:
    try:
        page = deps.store.list_jobs(state=state, limit=limit, token=next_token)
    except BadPageToken as exc:
        raise Invalid("bad page token", [FieldError(path="query.next", reason=str(exc))]) from None
    return {"jobs": [job_summary(j) for j in page.jobs], "next": page.next_token}


def get_job(deps: JobsDeps, job_id: str) -> dict[str, Any]:
    view = _load_view(deps, job_id)
    return job_detail(view, deps.clock())


def _load_view(deps: JobsDeps, job_id: str) -> JobView:
    view = deps.store.get_job_view(job_id, max_events=TIMELINE_LENGTH) if _id_ok(job_id) else None
    if view is None:
        raise NotFound(f"no job {job_id!r}", [FieldError(path="path.id", reason="unknown job")])
    return view


def _id_ok(job_id: str) -> bool:
    return bool(JOB_ID_SHAPE.match(job_id))


# --- measures -----------------------------------------------------------------------------

JOB_NAME_SHAPE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # JobSpec.name's


def job_measures(deps: JobsDeps, name: str) -> dict[str, Any]:
    """The pace and start-up learned for the job name (`GET /measures?name=`); empty lists
    for a name never run. 400 naming `query.name` when it cannot be a job's name."""
    if not JOB_NAME_SHAPE.match(name):
        raise Invalid(
            "not a job name",
            [FieldError(path="query.name", reason="must be a job spec's name: a-z, 0-9, '-'")],
        )
    return measures_json(deps.store.job_measures(name))


# --- cancel -------------------------------------------------------------------------------


def cancel_job(deps: JobsDeps, job_id: str, *, identity: str) -> dict[str, Any]:
    """STOPPING with stop_reason `cancelled`, then the stop transition. Idempotent while the
    job is still stopping; 409 once it has ended."""
    job = _load_view(deps, job_id).job
    outcome = cancel_outcome(job)
    if outcome == "already_ended":
        raise _ended(job)
    if outcome == "stop":
        now = deps.clock()
        reason = f"cancelled by {identity}"
        try:
            job = deps.store.transition_job(
                job_id,
                JobState.STOPPING,
                expected=ACTIVE_STATES - {JobState.STOPPING},
                now=now,
                event=TimelineEvent(
                    job_id=job_id,
                    at=now,
                    kind="cancel_requested",
                    message=reason,
                ),
                stop_reason="cancelled",
                state_reason=reason,
            )
        except StateConflict as exc:  # changed between read and write
            if exc.job is None:
                raise NotFound(f"no job {job_id!r}") from None
            if cancel_outcome(exc.job) == "already_ended":
                raise _ended(exc.job) from None
            job = exc.job
        else:
            deps.events.publish(transition_event(job, reason=reason, at=now))
    # Started on every cancel call: if an earlier start was lost, this one repairs it.
    deps.transitions.start(
        TransitionRequest(
            action="stop",
            job_id=job_id,
            generation=job.current_generation,
            reason=job.stop_reason or "cancelled",
        )
    )
    return get_job(deps, job_id)


def _ended(job: Job) -> Conflict:
    return Conflict(
        f"job {job.job_id} has already ended ({job.state.value}); nothing to cancel",
        [FieldError(path="state", reason=f"is {job.state.value}, a terminal state")],
    )


# --- views --------------------------------------------------------------------------------


def job_summary(job: Job) -> dict[str, Any]:
    """A job in `GET /jobs`: its spend is the job item's, which the monitor refreshes in steps
    (within 1 % of the budget or a cent: `functions/domain/spend.py`); the detail's is exact."""
    return {
        "job_id": job.job_id,
        "name": job.name,
        "state": job.state.value,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "budget_usd": job.budget_usd,
        "spent_usd": job.spent_usd,
        "generation": job.current_generation,
    }


def _generation_view(gen: Generation, job: Job, now: float) -> dict[str, Any]:
    # Never the token hash or the storage credentials.
    host = host_state(gen, job.spec.policy.heartbeat_timeout_s, now)
    return {
        "generation": gen.generation,
        "status": gen.status,  # the record's; `state` is what the host is doing
        "state": host.state,
        "state_since": host.since,
        "instance_id": gen.instance_id,
        "machine_id": gen.machine_id,
        "offer_id": gen.offer_id,
        "usd_per_hour": gen.usd_per_hour,
        "lease_expires_at": gen.lease_expires_at or None,
        "last_heartbeat": gen.heartbeat.model_dump(mode="json") if gen.heartbeat else None,
    }


def _spend_bound(job: Job, current: Generation | None) -> dict[str, Any]:
    """Only while the last run could not read Vast's charges: the most the job can have cost
    (its traffic since the last read bounded, not known) and when they were last read."""
    if current is None or current.traffic_bound_usd <= 0:
        return {}
    return {
        "upper_bound_usd": job.spent_usd + current.traffic_bound_usd,
        "charges_read_at": current.charges_read_at,
    }


def job_detail(view: JobView, now: float) -> dict[str, Any]:
    job = with_known_spend(view.job, view.generations)  # the spend as last measured
    checkpoints = [
        g.heartbeat.last_checkpoint
        for g in view.generations
        if g.heartbeat and g.heartbeat.last_checkpoint
    ]
    last_checkpoint = max(checkpoints, key=lambda c: (c.step, c.generation), default=None)
    recorded_outputs = [g.heartbeat.outputs for g in view.generations if g.heartbeat]
    outputs = max(
        (o for o in recorded_outputs if o is not None), key=lambda o: o.generation, default=None
    )
    current = view.current
    transition = last_transition(job, current)
    error = last_error(job, view.generations)
    return {
        **job_summary(job),
        # Only while it is the state of affairs (`job_status.current_reason`).
        "state_reason": current_reason(job),
        "last_transition": transition.model_dump(mode="json"),
        "progress": progress(job, current, view.generations).model_dump(mode="json"),
        "last_error": error.model_dump(mode="json") if error else None,
        "stop_reason": job.stop_reason,
        "submitted_by": job.submitted_by,
        "restarts": job.restarts,
        # Why the newest generation that failed did (its agent's words: `crashes.py`).
        "error": last_failure(view.generations),
        "spend": {
            "spent_usd": job.spent_usd,
            "budget_usd": job.budget_usd,
            "remaining_usd": job.remaining_budget_usd,
            "fraction_used": round(job.spent_usd / job.budget_usd, 4) if job.budget_usd else None,
            **_spend_bound(job, current),
        },
        "host": _generation_view(current, job, now) if current else None,
        "last_checkpoint": (
            last_checkpoint.model_dump(mode="json", exclude_none=True) if last_checkpoint else None
        ),
        # The job's result as recorded (invariant 10); what `tether download --outputs` fetches.
        "outputs": (
            {"generation": outputs.generation, "files": outputs.files, "bytes": outputs.bytes}
            if outputs
            else None
        ),
        "recorded_checkpoints": [  # what the next host may restore, newest first
            c.model_dump(mode="json", exclude_none=True) for c in job.recorded_checkpoints
        ],
        "spec": job.spec.model_dump(mode="json"),
        "timeline": [
            {"at": e.at, "kind": e.kind, "message": e.message, "data": e.data} for e in view.events
        ],
        "as_of": now,
    }
