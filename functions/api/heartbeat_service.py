"""The agent heartbeat, in the monitor's shape: gather the facts, decide once, apply
(docs/architecture.md#heartbeat).

Gather (`_gather`): the job and the generation named by the body (`job_id`, `generation`), in
one BatchGetItem, authenticated: the bearer token's sha256 must equal the hash on the generation
item, compared in constant time. Only for the heartbeat that first reports a replacement's first
step after its restore, the generation before it too (the work the fault lost).

Decide: `functions.domain.heartbeat_decision.decide_heartbeat`, pure. A valid token of a
generation that is no longer current gets `superseded` and lease 0, never a new lease. A current
one gets a new lease only while a monitor run recently completed its job's evaluation
(`supervised_at`).

Apply (`_apply`): the conditional write of the heartbeat and the lease; only if it held (the
generation is still current with this token), the checkpoint record, the timeline events and the
secrets' values the reply carries. The job the reply carries to an agent that asks (`wants_job`,
`functions/domain/job_bootstrap.py`) is part of the decision's answer, so it too goes out only
when the write held. A write refused because the generation was replaced between
the read and the write is answered `superseded`.

Order: the heartbeat is stamped with when API Gateway received it (`received_at`, the event's
`requestContext.timeEpoch`), and is not stored over one of the same generation received later
(`JobStore.store_heartbeat`). Such a stale heartbeat gets the command and lease it was decided
(no credentials, secrets or job), changes nothing else and is logged `stale`: its agent has
sent a newer one since, and has stopped waiting for this answer.
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
from functions.domain.errors import FieldError, Invalid, Unauthenticated, field_errors
from functions.domain.heartbeat_contract import HeartbeatReply, HeartbeatRequest, SecretValues
from functions.domain.heartbeat_decision import (
    HeartbeatDecision,
    HeartbeatFacts,
    HeartbeatMeasures,
    LeaseDecision,
    decide_heartbeat,
    previous_generation_needed,
)
from functions.domain.job import Generation
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
class HeartbeatOutcome:
    reply: HeartbeatReply
    lease: LeaseDecision
    measures: HeartbeatMeasures = field(default_factory=HeartbeatMeasures)
    stale: bool = False  # not stored: a heartbeat received after it was stored first


def handle_heartbeat(
    deps: HeartbeatDeps,
    request: HeartbeatRequest,
    token: str,
    *,
    received_at: float | None = None,
) -> HeartbeatOutcome:
    """`received_at`: when API Gateway received the heartbeat (None: unknown, unordered)."""
    now = deps.clock()
    token_hash = hash_token(token)
    facts = _gather(deps, request, token_hash, now)
    decision = decide_heartbeat(
        facts,
        now=now,
        supervised_max_age_s=deps.settings.supervised_max_age_s,
        received_at=received_at,
    )
    return _apply(deps, request, token_hash, decision, facts.generation)


def _gather(
    deps: HeartbeatDeps, request: HeartbeatRequest, token_hash: str, now: float
) -> HeartbeatFacts:
    """The authenticated job and generation, and the generation before it when the decision
    needs it (`previous_generation_needed`)."""
    job, generation = deps.store.load_heartbeat_context(request.job_id, request.generation)
    stored_hash = generation.token_hash if generation else _NO_HASH
    if not hmac.compare_digest(stored_hash, token_hash) or job is None or generation is None:
        raise _unauthorized("not the token of this job generation")
    previous = None
    if previous_generation_needed(job, generation, request, now):
        _, previous = deps.store.load_heartbeat_context(job.job_id, generation.generation - 1)
    return HeartbeatFacts(job=job, generation=generation, request=request, previous=previous)


def _apply(
    deps: HeartbeatDeps,
    request: HeartbeatRequest,
    token_hash: str,
    decision: HeartbeatDecision,
    generation: Generation,
) -> HeartbeatOutcome:
    """The decision's writes, in order, each conditional on the generation still being current
    with this token; then the reply. `generation`: as read for this heartbeat (what the
    heartbeat's write compares with)."""
    write = decision.write
    if write is None:  # superseded: nothing is stored
        return HeartbeatOutcome(reply=decision.answer.reply, lease=decision.answer.lease)
    stored = deps.store.store_heartbeat(
        request.job_id,
        request.generation,
        token_hash=token_hash,
        heartbeat=write.heartbeat,
        lease_expires_at=write.lease_expires_at,
        training_start_step=write.training_start_step,
        gpu_busy=write.gpu_busy,
        resumed=write.resumed,
        previous=generation,
    )
    if not stored:
        if deps.store.stale_heartbeat(
            request.job_id,
            request.generation,
            token_hash=token_hash,
            received_at=write.heartbeat.received_at,
        ):
            reply = decision.answer.reply.model_copy(update={"job": None, "credentials": None})
            return HeartbeatOutcome(reply=reply, lease=decision.answer.lease, stale=True)
        replaced = decision.answer_if_replaced  # replaced between our read and our write
        return HeartbeatOutcome(reply=replaced.reply, lease=replaced.lease)
    if decision.checkpoints is not None:
        deps.store.record_checkpoints(
            request.job_id,
            request.generation,
            token_hash=token_hash,
            checkpoints=decision.checkpoints.checkpoints,
            previous_version=decision.checkpoints.previous_version,
        )
    for event in decision.events:
        deps.store.append_event(event)
    reply = decision.answer.reply
    if decision.secret_names is not None:
        reply = reply.model_copy(update={"secrets": _secret_values(deps, decision.secret_names)})
    return HeartbeatOutcome(reply=reply, lease=decision.answer.lease, measures=decision.measures)


def _secret_values(deps: HeartbeatDeps, names: tuple[str, ...]) -> SecretValues:
    """The values of the secrets the job's spec lists (and the names no longer stored), read
    for this reply only: never stored, logged or put on the timeline."""
    values, missing = deps.secrets.values(names)
    return SecretValues(values=values, missing=missing)
