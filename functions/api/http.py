"""The HTTP edge shared by the API functions: the error contract, body parsing, the route guard.

Every client mistake becomes `{"error": code, "message": …, "details": [{"path", "reason"}]}`
with a 4xx status (docs/architecture.md#invariant-5). Services raise domain errors
(`functions/domain/errors.py`); request parsing here raises the few errors that only HTTP has
(content type, malformed JSON, payload too large, method not allowed). `ERRORS` maps both to a
status and a code, in one table, and `install_error_handlers` applies it, with Powertools'
validation errors and unknown routes.

Every IAM route declares its guard with the route (`middlewares=[iam_guard(...)]`): the caller's
IAM identity, then the query parameters it accepts, checked before the handler runs; the handler
reads the identity with `caller_arn`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import ApiGatewayResolver
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from functions.domain.documents import MAX_DEPTH, DocumentTooComplex, check_depth
from functions.domain.errors import (
    Conflict,
    DomainError,
    FieldError,
    Invalid,
    LogsUnavailable,
    NotFound,
    Unauthenticated,
    Unavailable,
    field_errors,
)
from functions.observability import logger


class MalformedJson(Invalid):
    """The body is not JSON (or not base64, when API Gateway encoded it)."""


class PayloadTooLarge(DomainError):
    pass


class UnsupportedMediaType(DomainError):
    pass


class MethodNotAllowed(DomainError):
    pass


# The one table. An error takes the entry of its nearest class (`status_of` walks its MRO).
ERRORS: dict[type[DomainError], tuple[HTTPStatus, str]] = {
    MalformedJson: (HTTPStatus.BAD_REQUEST, "malformed_json"),
    Invalid: (HTTPStatus.BAD_REQUEST, "invalid_request"),
    Unauthenticated: (HTTPStatus.UNAUTHORIZED, "unauthorized"),
    NotFound: (HTTPStatus.NOT_FOUND, "not_found"),
    MethodNotAllowed: (HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed"),
    Conflict: (HTTPStatus.CONFLICT, "conflict"),
    PayloadTooLarge: (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large"),
    UnsupportedMediaType: (HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
    LogsUnavailable: (HTTPStatus.SERVICE_UNAVAILABLE, "logs_unavailable"),
    Unavailable: (HTTPStatus.SERVICE_UNAVAILABLE, "unavailable"),
}


def status_of(error: DomainError) -> tuple[HTTPStatus, str]:
    """The status and code of `error`: its nearest class in `ERRORS`."""
    for cls in type(error).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return HTTPStatus.BAD_REQUEST, "bad_request"


def error_response(error: DomainError, headers: Mapping[str, str] | None = None) -> Response[Any]:
    status, code = status_of(error)
    body = {
        "error": code,
        "message": error.message,
        "details": [d.model_dump() for d in error.details],
    }
    return json_response(status, body, headers=headers)


def json_response(
    status: int, body: Any, headers: Mapping[str, str] | None = None
) -> Response[Any]:
    return Response(
        status_code=int(status),
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, separators=(",", ":"), allow_nan=False),
        headers=dict(headers or {}),
    )


# --- request parsing ----------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(raw_event: Mapping[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """The request body as a JSON object, or the error that says what is wrong with it: at most
    `max_bytes` long and `MAX_DEPTH` levels deep (`functions.domain.documents`); nesting past
    the JSON parser's own recursion limit is refused the same way."""
    headers = {str(k).lower(): v for k, v in (raw_event.get("headers") or {}).items()}
    content_type = str(headers.get("content-type", "")).split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaType(
            "the body must be JSON",
            [FieldError(path="header.content-type", reason="must be application/json")],
        )
    body = raw_event.get("body")
    if body is None or body == "":
        raise Invalid("the request needs a JSON body", [_root("required")])
    if raw_event.get("isBase64Encoded"):
        try:
            data = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedJson("the body is not valid base64", [_root("invalid")]) from None
    else:
        data = str(body).encode("utf-8", errors="surrogatepass")
    if len(data) > max_bytes:
        raise PayloadTooLarge(
            f"the body is {len(data)} bytes; at most {max_bytes} are accepted",
            [_root(f"at most {max_bytes} bytes")],
        )
    too_deep = f"is nested deeper than {MAX_DEPTH} levels"
    try:
        text = data.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
        check_depth(value, max_depth=MAX_DEPTH)
    except (RecursionError, DocumentTooComplex):
        raise MalformedJson("the body is nested too deeply", [_root(too_deep)]) from None
    except (UnicodeDecodeError, ValueError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else "not valid JSON"
        raise MalformedJson("the body is not valid JSON", [_root(reason)]) from None
    if not isinstance(value, dict):
        raise Invalid(
            "the body must be a JSON object",
            [_root(f"must be an object, got {type(value).__name__}")],
        )
    return value


def _root(reason: str) -> FieldError:
    return FieldError(path="body", reason=reason)


def reject_unknown_query(raw_event: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(raw_event.get("queryStringParameters") or {}) - set(allowed))
    if unknown:
        raise Invalid(
            "unknown query parameter",
            [
                FieldError(path=f"query.{name}", reason=f"unknown (accepted: {sorted(allowed)})")
                for name in unknown
            ],
        )


def iam_identity(raw_event: Mapping[str, Any]) -> str:
    """The caller's IAM ARN, which API Gateway puts there after SigV4 (defence in depth: the
    route's IAM authorizer already refused unsigned calls in AWS; locally it may be skipped)."""
    context = raw_event.get("requestContext") or {}
    iam = ((context.get("authorizer") or {}).get("iam")) or {}
    arn = iam.get("userArn") if isinstance(iam, Mapping) else None
    if not isinstance(arn, str) or not arn:
        raise Unauthenticated(
            "this route needs AWS SigV4 (IAM) authentication",
            [FieldError(path="header.authorization", reason="no IAM identity on the request")],
        )
    return arn


# --- the route guard ----------------------------------------------------------------------

_CALLER_ARN = "caller_arn"  # where the guard leaves the identity, in the request's app context

RouteGuard = Callable[[ApiGatewayResolver, NextMiddleware], Response[Any]]


def iam_guard(*allowed_query: str) -> RouteGuard:
    """The checks every IAM route makes before its handler runs, in this order: the caller's IAM
    identity (401 without one), then no query parameter but `allowed_query` (400 naming each
    unknown one). Powertools has validated the declared parameters' values before it (it runs
    first in the route's middleware stack), and a 404 or 405 never reaches it."""

    def guard(app: ApiGatewayResolver, next_middleware: NextMiddleware) -> Response[Any]:
        raw = app.current_event.raw_event
        app.context[_CALLER_ARN] = iam_identity(raw)  # cleared when the request is answered
        reject_unknown_query(raw, allowed_query)
        return next_middleware(app)

    return guard


def caller_arn(app: ApiGatewayResolver) -> str:
    """The IAM identity `iam_guard` checked for the current request."""
    return str(app.context[_CALLER_ARN])


def validation_details(exc: RequestValidationError | ValidationError) -> list[FieldError]:
    """Powertools' validation errors in our `path: reason` vocabulary."""
    if isinstance(exc, ValidationError):
        return field_errors(exc)
    line_errors: list[InitErrorDetails] = []
    for err in exc.errors():
        loc = tuple(p for p in err.get("loc", ()) if p != "body") or ("(root)",)
        ctx = err.get("ctx") or {}
        try:
            line_errors.append(
                {"type": err["type"], "loc": loc, "input": err.get("input"), "ctx": ctx}
            )
        except KeyError:
            continue
    try:
        return field_errors(ValidationError.from_exception_data("request", line_errors))
    except (KeyError, TypeError, ValueError):
        # an error type pydantic cannot rebuild: keep the location, say it is invalid
        return [
            FieldError(
                path=".".join(str(p) for p in e.get("loc", ())) or "(root)",
                reason="is invalid",
            )
            for e in exc.errors()
        ]


# --- one place that maps errors to responses ------------------------------------------------


def install_error_handlers(
    app: APIGatewayHttpResolver,
    routes: Mapping[str, set[str]],
    *,
    challenge: str | None = None,
) -> None:
    """`routes`: path pattern (`/jobs/{id}`) → methods, to tell 405 from 404. `challenge`: the
    `WWW-Authenticate` value every 401 of this app carries (the scheme its callers must use)."""
    compiled = [
        (re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", pattern) + "$"), methods)
        for pattern, methods in routes.items()
    ]

    def _domain_error(exc: DomainError) -> Response[Any]:
        status, code = status_of(exc)
        logger.info("client error", extra={"error": code, "status": int(status)})
        headers = {}
        if status == HTTPStatus.UNAUTHORIZED and challenge:
            headers["WWW-Authenticate"] = challenge
        return error_response(exc, headers)

    def _validation(exc: RequestValidationError) -> Response[Any]:
        return error_response(Invalid("the request is not valid", validation_details(exc)))

    @app.not_found
    def _not_found(_: Exception) -> Response[Any]:
        path = app.current_event.path
        method = app.current_event.http_method.upper()
        allowed = sorted({m for rx, methods in compiled if rx.match(path) for m in methods})
        if allowed:
            return error_response(
                MethodNotAllowed(
                    f"{method} is not allowed on {path}",
                    [FieldError(path="method", reason=f"must be one of {allowed}")],
                ),
                headers={"Allow": ", ".join(allowed)},
            )
        return error_response(NotFound(f"no route {method} {path}"))

    def _unexpected(exc: Exception) -> Response[Any]:
        # Not a client mistake: log it with its trace, answer without one.
        logger.exception("unhandled error")
        return json_response(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            {"error": "internal", "message": "internal error; see the function's logs"},
        )

    app.exception_handler(DomainError)(_domain_error)
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(Exception)(_unexpected)
