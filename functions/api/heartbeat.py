"""`POST /agent/heartbeat`: no API Gateway authorizer; the per-generation bearer token is checked
here (`heartbeat_service`). Its role can read and update the table, nothing else."""

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.api import heartbeat_service
from functions.api import metrics as api_metrics
from functions.api.http import (
    install_error_handlers,
    json_response,
    parse_json_body,
    reject_unknown_query,
)
from functions.observability import logger, metrics, tracer
from functions.settings import HeartbeatSettings, load_settings

ROUTES = {"/agent/heartbeat": {"POST"}}
CHALLENGE = 'Bearer realm="tether-agent"'

app = APIGatewayHttpResolver(enable_validation=True)
install_error_handlers(app, ROUTES, challenge=CHALLENGE)


@factory.per_container
def dependencies() -> heartbeat_service.HeartbeatDeps:
    settings = load_settings(HeartbeatSettings)
    return heartbeat_service.HeartbeatDeps(
        settings=settings,
        store=factory.store(settings.table_name),
        clock=factory.now,
        secrets=factory.secret_store(),
    )


@app.post("/agent/heartbeat")
def heartbeat() -> Response[Any]:
    deps = dependencies()
    raw = app.current_event.raw_event
    with api_metrics.counting_auth_failures():
        # A missing or malformed Authorization header is a 401 before the body is read.
        token = heartbeat_service.bearer_token(app.current_event.headers)
        reject_unknown_query(raw, ())
        body = parse_json_body(raw, max_bytes=deps.settings.max_body_bytes)
        request = heartbeat_service.parse_request(body)
        outcome = heartbeat_service.handle_heartbeat(
            deps, request, token, received_at=received_at(raw)
        )
    api_metrics.heartbeat_answered(request, outcome)
    return json_response(HTTPStatus.OK, outcome.reply.model_dump(mode="json"))


def received_at(event: dict[str, Any]) -> float | None:
    """When API Gateway received the request (`requestContext.timeEpoch`, milliseconds), in
    seconds; None when the event has none (an invocation not through API Gateway)."""
    epoch_ms = (event.get("requestContext") or {}).get("timeEpoch")
    if isinstance(epoch_ms, int) and not isinstance(epoch_ms, bool) and epoch_ms > 0:
        return epoch_ms / 1000
    return None


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler  # records no reply (it carries credentials, secrets)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
