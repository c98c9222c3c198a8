"""The route guard (`iam_guard` in functions/api/http.py): every IAM route refuses a caller
without an IAM identity (401) and a query parameter it does not accept (400 naming it), with the
same bodies the API has always sent, before its handler runs."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Annotated, Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.api import jobs, logs
from functions.api.http import caller_arn, iam_guard, install_error_handlers, json_response
from tether_local.aws.apigw import http_api_event

ALICE = "arn:aws:iam::123456789012:user/alice"
UNSIGNED = {
    "error": "unauthorized",
    "message": "this route needs AWS SigV4 (IAM) authentication",
    "details": [{"path": "header.authorization", "reason": "no IAM identity on the request"}],
}

demo = APIGatewayHttpResolver(enable_validation=True)
install_error_handlers(demo, {"/items": {"GET"}})
handled: list[str] = []


@demo.get("/items", middlewares=[iam_guard("limit", "after")])
def items(limit: Annotated[int, Query(ge=1, le=10)] = 5) -> Response[Any]:
    handled.append(caller_arn(demo))
    return json_response(200, {"limit": limit, "caller": caller_arn(demo)})


def call(app: APIGatewayHttpResolver, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    result = app.resolve(http_api_event(method, path, **kwargs), LambdaContext())
    return result["statusCode"], json.loads(result["body"])


@pytest.fixture(autouse=True)
def _no_calls_yet() -> None:
    handled.clear()


def test_a_signed_call_with_accepted_parameters_reaches_the_handler_with_its_identity() -> None:
    assert call(demo, "GET", "/items", query={"limit": "3"}, iam_arn=ALICE) == (
        200,
        {"limit": 3, "caller": ALICE},
    )
    assert handled == [ALICE]


def test_an_unsigned_call_is_401_and_never_reaches_the_handler() -> None:
    assert call(demo, "GET", "/items", iam_arn=None) == (401, UNSIGNED)
    assert handled == []


def test_an_unknown_query_parameter_is_400_naming_each_one() -> None:
    status, body = call(demo, "GET", "/items", query={"colour": "red", "b": "1"}, iam_arn=ALICE)
    assert (status, body) == (
        400,
        {
            "error": "invalid_request",
            "message": "unknown query parameter",
            "details": [
                {"path": "query.b", "reason": "unknown (accepted: ['after', 'limit'])"},
                {"path": "query.colour", "reason": "unknown (accepted: ['after', 'limit'])"},
            ],
        },
    )
    assert handled == []


def test_the_identity_is_checked_before_the_query() -> None:
    assert call(demo, "GET", "/items", query={"colour": "red"}, iam_arn=None) == (401, UNSIGNED)


def test_a_declared_parameter_out_of_bounds_is_refused_before_the_identity() -> None:
    # Powertools validates the declared parameters first, as it did before the guard existed.
    status, body = call(demo, "GET", "/items", query={"limit": "0"}, iam_arn=None)
    assert status == 400
    assert body["error"] == "invalid_request"
    assert [d["path"] for d in body["details"]] == ["query.limit"]


def test_a_wrong_method_is_405_without_an_identity() -> None:
    status, body = call(demo, "DELETE", "/items", iam_arn=None)
    assert status == 405
    assert body["error"] == "method_not_allowed"


# Every IAM route of the jobs and logs functions, with a query that passes Powertools'
# validation and the parameters its guard accepts (as the reason lists them).
ROUTES: list[tuple[ModuleType, str, str, dict[str, str], str]] = [
    (jobs, "POST", "/jobs", {}, "[]"),
    (jobs, "GET", "/jobs", {}, "['limit', 'next', 'state']"),
    (jobs, "GET", "/jobs/tiny-cpu-0000abcd", {}, "[]"),
    (jobs, "POST", "/jobs/tiny-cpu-0000abcd/cancel", {}, "[]"),
    (jobs, "POST", "/code/uploads", {}, "[]"),
    (jobs, "GET", "/measures", {"name": "tiny-cpu"}, "['name']"),
    (logs, "GET", "/jobs/tiny-cpu-0000abcd/logs", {}, "['after', 'limit']"),
    (
        logs,
        "GET",
        "/jobs/tiny-cpu-0000abcd/files",
        {"outputs": "true"},
        "['checkpoint', 'limit', 'offset', 'outputs']",
    ),
]
IDS = [f"{method} {path}" for _, method, path, _, _ in ROUTES]


@pytest.mark.parametrize(("function", "method", "path", "query", "accepted"), ROUTES, ids=IDS)
def test_every_iam_route_refuses_an_unsigned_call(
    function: ModuleType, method: str, path: str, query: dict[str, str], accepted: str
) -> None:
    # Refused before the handler: no table, no settings, no storage are needed to answer.
    assert call(function.app, method, path, query=query, iam_arn=None) == (401, UNSIGNED)


@pytest.mark.parametrize(("function", "method", "path", "query", "accepted"), ROUTES, ids=IDS)
def test_every_iam_route_refuses_an_unknown_query_parameter(
    function: ModuleType, method: str, path: str, query: dict[str, str], accepted: str
) -> None:
    status, body = call(function.app, method, path, query=query | {"zz": "1"}, iam_arn=ALICE)
    assert (status, body) == (
        400,
        {
            "error": "invalid_request",
            "message": "unknown query parameter",
            "details": [{"path": "query.zz", "reason": f"unknown (accepted: {accepted})"}],
        },
    )
