"""The user-facing job API (IAM/SigV4 auth on API Gateway): a thin layer over `job_service`.

Each route's guard (`iam_guard`: the caller's identity, the query parameters it accepts) is
declared with the route; a handler parses the body into a domain type before the service sees it.

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
    caller_arn,
    iam_guard,
    install_error_handlers,
    json_response,
    parse_json_body,
)
from functions.domain.code_archive import parse_upload_request
from functions.domain.submission import parse_submission
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


@app.post("/jobs", middlewares=[iam_guard()])
def submit() -> Response[Any]:
    deps = dependencies()
    body = parse_json_body(app.current_event.raw_event, max_bytes=deps.settings.max_body_bytes)
    submission = parse_submission(body)
    key = app.current_event.headers.get("idempotency-key")
    view, created = job_service.submit_job(
        deps, submission, identity=caller_arn(app), idempotency_key=key
    )
    api_metrics.job_submitted(created)
    headers = {} if created else {"Idempotent-Replayed": "true"}
    headers["Location"] = f"/jobs/{view['job_id']}"
    return json_response(HTTPStatus.CREATED, view, headers=headers)


@app.post("/code/uploads", middlewares=[iam_guard()])
def code_upload() -> Response[Any]:
    deps = dependencies()
    body = parse_json_body(app.current_event.raw_event, max_bytes=deps.settings.max_body_bytes)
    wanted = parse_upload_request(body)
    return json_response(HTTPStatus.OK, code_service.request_upload(deps.code, wanted))


@app.get("/jobs", middlewares=[iam_guard("state", "limit", "next")])
def list_jobs(
    state: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    next_token: Annotated[str | None, Query(alias="next", min_length=1, max_length=2048)] = None,
) -> Response[Any]:
    wanted = job_service.parse_state_filter(state)
    page = job_service.list_jobs(dependencies(), state=wanted, limit=limit, next_token=next_token)
    return json_response(HTTPStatus.OK, page)


@app.get("/jobs/<job_id>", middlewares=[iam_guard()])
def get_job(job_id: str) -> Response[Any]:
    return json_response(HTTPStatus.OK, job_service.get_job(dependencies(), job_id))


@app.get("/measures", middlewares=[iam_guard("name")])
def measures(name: Annotated[str, Query(min_length=1, max_length=63)]) -> Response[Any]:
    return json_response(HTTPStatus.OK, job_service.job_measures(dependencies(), name))


@app.post("/jobs/<job_id>/cancel", middlewares=[iam_guard()])
def cancel(job_id: str) -> Response[Any]:
    view = job_service.cancel_job(dependencies(), job_id, identity=caller_arn(app))
    api_metrics.cancel_requested()
    return json_response(HTTPStatus.ACCEPTED, view)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
