"""The user-facing job API (IAM/SigV4 auth on API Gateway): a thin layer over `job_service`.

POST /jobs                 submit (honours Idempotency-Key)            201
GET  /jobs                 list ?state=&limit=&next=                     200
GET  /jobs/{id}            job, host, spend vs budget, checkpoint, timeline  200
POST /jobs/{id}/cancel     idempotent; 409 once the job has ended        202
POST /code/uploads         {sha256, size_bytes} → presigned PUT, or exists  200
GET  /measures?name=       pace and start-up learned for a job name     200
"""

from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.adapters.code_bucket import CodeBucket
from functions.api import code_service, job_service
from functions.api import metrics as api_metrics
from functions.api.http import (
    iam_identity,
    install_error_handlers,
    json_response,
    parse_json_body,
    reject_unknown_query,
)
from functions.observability import logger, metrics, tracer
from functions.settings import JobsApiSettings, load_settings

ROUTES = {
    "/jobs": {"GET", "POST"},
    "/jobs/{id}": {"GET"},
    "/jobs/{id}/cancel": {"POST"},
    "/code/uploads": {"POST"},
    "/measures": {"GET"},
    "/jobs/{id}/logs": {"GET"},  # served by the logs function; listed here for 405s
}

app = APIGatewayHttpResolver(enable_validation=True)
install_error_handlers(app, ROUTES)


@factory.per_container
def dependencies() -> job_service.JobsDeps:
    settings = load_settings(JobsApiSettings)
    return job_service.JobsDeps(
        settings=settings,
        store=factory.store(settings.table_name),
        transitions=factory.transitions(settings.state_machine_arn),
        events=factory.job_events(settings.job_events_topic_arn),
        clock=factory.now,
        secrets=factory.secret_store(),
        code=lambda: _code_bucket(settings),
    )


def _code_bucket(settings: JobsApiSettings) -> CodeBucket | None:
    if settings.cloudflare_secret_arn is None:
        return None
    return factory.code_bucket(
        settings.cloudflare_secret_arn, settings.cloudflare_base_url, settings.r2_endpoint
    )


@app.post("/jobs")
def submit() -> Response[Any]:
    raw = app.current_event.raw_event
    identity = iam_identity(raw)
    deps = dependencies()
    reject_unknown_query(raw, ())
    body = parse_json_body(raw, max_bytes=deps.settings.max_body_bytes)
    key = app.current_event.headers.get("idempotency-key")
    view, created = job_service.submit_job(deps, body, identity=identity, idempotency_key=key)
    api_metrics.job_submitted(created)
    headers = {} if created else {"Idempotent-Replayed": "true"}
    headers["Location"] = f"/jobs/{view['job_id']}"
    return json_response(HTTPStatus.CREATED, view, headers=headers)


@app.post("/code/uploads")
def code_upload() -> Response[Any]:
    raw = app.current_event.raw_event
    iam_identity(raw)
    deps = dependencies()
    reject_unknown_query(raw, ())
    body = parse_json_body(raw, max_bytes=deps.settings.max_body_bytes)
    return json_response(HTTPStatus.OK, code_service.request_upload(deps.code, body))


@app.get("/jobs")
def list_jobs(
    state: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    next_token: Annotated[str | None, Query(alias="next", min_length=1, max_length=2048)] = None,
) -> Response[Any]:
    iam_identity(app.current_event.raw_event)
    reject_unknown_query(app.current_event.raw_event, ("state", "limit", "next"))
    page = job_service.list_jobs(dependencies(), state=state, limit=limit, next_token=next_token)
    return json_response(HTTPStatus.OK, page)


@app.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response[Any]:
    iam_identity(app.current_event.raw_event)
    reject_unknown_query(app.current_event.raw_event, ())
    return json_response(HTTPStatus.OK, job_service.get_job(dependencies(), job_id))


@app.get("/measures")
def measures(name: Annotated[str, Query(min_length=1, max_length=63)]) -> Response[Any]:
    iam_identity(app.current_event.raw_event)
    reject_unknown_query(app.current_event.raw_event, ("name",))
    return json_response(HTTPStatus.OK, job_service.job_measures(dependencies(), name))


@app.post("/jobs/<job_id>/cancel")
def cancel(job_id: str) -> Response[Any]:
    identity = iam_identity(app.current_event.raw_event)
    reject_unknown_query(app.current_event.raw_event, ())
    view = job_service.cancel_job(dependencies(), job_id, identity=identity)
    api_metrics.cancel_requested()
    return json_response(HTTPStatus.ACCEPTED, view)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
