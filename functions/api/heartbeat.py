"""`POST /agent/heartbeat`: no API Gateway authorizer; the per-generation bearer token is checked
here (`heartbeat_service`). Its role can read and update the table, nothing else."""

from functools import cache
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters.store import JobStore
from functions.api import heartbeat_service
from functions.api.http import (
    Unauthorized,
    install_error_handlers,
    json_response,
    parse_json_body,
    reject_unknown_query,
)
from functions.domain.measures import CHECKPOINT_LAG_METRIC, RECOVERY_TIME_METRIC
from functions.observability import MetricUnit, logger, metrics, tracer
from functions.settings import HeartbeatSettings, load_settings

ROUTES = {"/agent/heartbeat": {"POST"}}

app = APIGatewayHttpResolver(enable_validation=True)
install_error_handlers(app, ROUTES)


@cache
def dependencies() -> heartbeat_service.HeartbeatDeps:
    settings = load_settings(HeartbeatSettings)
    return heartbeat_service.HeartbeatDeps(settings=settings, store=JobStore(settings.table_name))


@app.post("/agent/heartbeat")
def heartbeat() -> Response[Any]:
    deps = dependencies()
    raw = app.current_event.raw_event
    try:
        # A missing or malformed Authorization header is a 401 before the body is read.
        token = heartbeat_service.bearer_token(app.current_event.headers)
    except Unauthorized:
        metrics.add_metric(name="HeartbeatAuthFailures", unit=MetricUnit.Count, value=1)
        raise
    reject_unknown_query(raw, ())
    body = parse_json_body(raw, max_bytes=deps.settings.max_body_bytes)
    request = heartbeat_service.parse_request(body)
    try:
        outcome = heartbeat_service.handle_heartbeat(deps, request, token)
    except Unauthorized:
        metrics.add_metric(name="HeartbeatAuthFailures", unit=MetricUnit.Count, value=1)
        raise
    reply, decision, measures = outcome.reply, outcome.decision, outcome.measures
    metrics.add_metric(name="Heartbeats", unit=MetricUnit.Count, value=1)
    if decision.command == "superseded":
        metrics.add_metric(name="HeartbeatsSuperseded", unit=MetricUnit.Count, value=1)
    elif not decision.lease_renewed:
        metrics.add_metric(name="LeasesNotRenewed", unit=MetricUnit.Count, value=1)
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
            "command": reply.command,
            "lease_renewed": decision.lease_renewed,
            "recovery_to_training_s": measures.recovery_to_training_s,
            "checkpoint_upload_lag_s": measures.checkpoint_upload_lag_s,
        },
    )
    return json_response(HTTPStatus.OK, reply.model_dump(mode="json"))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
