"""`GET /jobs/{id}/logs` and `GET /jobs/{id}/files` (IAM/SigV4 auth on API Gateway): presigned
URLs of the job's training log segments (`logs_service`) and of a recorded checkpoint's or the
outputs' files (`files_service`). Its own function, because it alone reads the Cloudflare
secret."""

from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.api import files_service, logs_service
from functions.api.http import iam_guard, install_error_handlers, json_response
from functions.observability import logger, metrics, tracer
from functions.settings import LogsApiSettings, load_settings

ROUTES = {"/jobs/{id}/logs": {"GET"}, "/jobs/{id}/files": {"GET"}}

app = APIGatewayHttpResolver(enable_validation=True)
install_error_handlers(app, ROUTES)


@factory.per_container
def dependencies() -> logs_service.LogsDeps:
    settings = load_settings(LogsApiSettings)
    return logs_service.LogsDeps(
        store=factory.store(settings.table_name),
        # Built on first use, so a job that does not exist never reads the Cloudflare secret.
        bucket=lambda: factory.read_only_bucket(
            settings.cloudflare_secret_arn, settings.cloudflare_base_url, settings.r2_endpoint
        ),
        clock=factory.now,
    )


@app.get("/jobs/<job_id>/logs", middlewares=[iam_guard("after", "limit")])
def job_logs(
    job_id: str,
    after: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=logs_service.MAX_PAGE)] = 50,
) -> Response[Any]:
    page = logs_service.list_logs(dependencies(), job_id, after=after, limit=limit)
    return json_response(HTTPStatus.OK, page)


@app.get(
    "/jobs/<job_id>/files", middlewares=[iam_guard("outputs", "checkpoint", "offset", "limit")]
)
def job_files(
    job_id: str,
    outputs: Annotated[bool, Query()] = False,
    checkpoint: Annotated[int | None, Query(ge=0, le=10**15)] = None,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=files_service.MAX_PAGE)] = files_service.MAX_PAGE,
) -> Response[Any]:
    listing = files_service.list_files(
        dependencies(),
        job_id,
        outputs=outputs,
        checkpoint=checkpoint,
        offset=offset,
        limit=limit,
    )
    return json_response(HTTPStatus.OK, listing)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
