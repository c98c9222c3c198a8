"""What the API functions count: every metric a route emits, in one place (the handlers only
call these). Names are the ones the dashboard and alarms read
(`infra/constructs/observability.py`); the one dimension is the service (`functions/observability`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from functions.api.heartbeat_service import HeartbeatOutcome
from functions.domain.errors import Unauthenticated
from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.measures import (
    CHECKPOINT_LAG_METRIC,
    JOBS_SUBMITTED_METRIC,
    RECOVERY_TIME_METRIC,
)
from functions.observability import MetricUnit, logger, metrics

HEARTBEAT_AUTH_FAILURES_METRIC = "HeartbeatAuthFailures"
HEARTBEATS_SUPERSEDED_METRIC = "HeartbeatsSuperseded"
LEASES_NOT_RENEWED_METRIC = "LeasesNotRenewed"
CANCELS_METRIC = "JobsCancelRequested"


def _count(name: str) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


@contextmanager
def counting_auth_failures() -> Iterator[None]:
    """Count a heartbeat refused for its token (a flood of junk heartbeats shows here)."""
    try:
        yield
    except Unauthenticated:
        _count(HEARTBEAT_AUTH_FAILURES_METRIC)
        raise


def heartbeat_answered(request: HeartbeatRequest, outcome: HeartbeatOutcome) -> None:
    """A heartbeat that got a reply: its measures emitted, the unusual replies counted, one
    log line. Plain heartbeats are not counted: a metric sent with every heartbeat is billed
    every hour a job runs, and the heartbeat function's Invocations (free) count them."""
    lease, measures = outcome.lease, outcome.measures
    if lease.command == "superseded":
        _count(HEARTBEATS_SUPERSEDED_METRIC)
    elif not lease.lease_renewed:
        _count(LEASES_NOT_RENEWED_METRIC)
    for name, seconds in (
        (RECOVERY_TIME_METRIC, measures.recovery_to_training_s),
        (CHECKPOINT_LAG_METRIC, measures.checkpoint_upload_lag_s),
    ):
        if seconds is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=seconds)
    logger.info(
        "heartbeat",
        extra={
            "job_id": request.job_id,
            "generation": request.generation,
            "phase": request.phase,
            "command": outcome.reply.command,
            "lease_renewed": lease.lease_renewed,
            "stale": outcome.stale,
            "recovery_to_training_s": measures.recovery_to_training_s,
            "checkpoint_upload_lag_s": measures.checkpoint_upload_lag_s,
        },
    )


def job_submitted(created: bool) -> None:
    """A replayed submit (same Idempotency-Key) is not a new job."""
    if created:
        _count(JOBS_SUBMITTED_METRIC)


def cancel_requested() -> None:
    _count(CANCELS_METRIC)
