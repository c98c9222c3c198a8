"""The HTTP edge shared by both API functions: the error contract, body parsing, identities.

Every client mistake becomes `{"error": code, "message": …, "details": [{"path", "reason"}]}`
with a 4xx status (DESIGN §6.5). Domain code raises `ApiError` subclasses; `install_error_handlers`
maps them, Powertools' validation errors and unknown routes in one place.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from functions.domain.errors import FieldError, field_errors
from functions.observability import logger


class ApiError(Exception):
    status = HTTPStatus.BAD_REQUEST
    code = "bad_request"

    def __init__(
        self,
        message: str,
        details: Sequence[FieldError] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)
        self.headers = dict(headers or {})


class BadRequest(ApiError):
    code = "bad_request"


class InvalidRequest(ApiError):
    """The body or query parsed but does not validate."""

    code = "invalid_request"


class MalformedJson(ApiError):
    code = "malformed_json"


class Unauthorized(ApiError):
    status = HTTPStatus.UNAUTHORIZED
    code = "unauthorized"


class Forbidden(ApiError):
    status = HTTPStatus.FORBIDDEN
    code = "forbidden"


class NotFound(ApiError):
    status = HTTPStatus.NOT_FOUND
    code = "not_found"


class MethodNotAllowed(ApiError):
    status = HTTPStatus.METHOD_NOT_ALLOWED
    code = "method_not_allowed"


class Conflict(ApiError):
    status = HTTPStatus.CONFLICT
    code = "conflict"


class PayloadTooLarge(ApiError):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    code = "payload_too_large"


class UnsupportedMediaType(ApiError):
    status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE
    code = "unsupported_media_type"


def error_response(error: ApiError) -> Response[Any]:
    body = {
        "error": error.code,
        "message": error.message,
        "details": [d.model_dump() for d in error.details],
    }
    return json_response(error.status, body, headers=error.headers)


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
    """The request body as a JSON object, or the ApiError that says what is wrong with it."""
    headers = {str(k).lower(): v for k, v in (raw_event.get("headers") or {}).items()}
    content_type = str(headers.get("content-type", "")).split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaType(
            "the body must be JSON",
            [FieldError(path="header.content-type", reason="must be application/json")],
        )
    body = raw_event.get("body")
    if body is None or body == "":
        raise InvalidRequest("the request needs a JSON body", [_root("required")])
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
    try:
        text = data.decode("utf-8")
        value = json.loads(text, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else "not valid JSON"
        raise MalformedJson("the body is not valid JSON", [_root(reason)]) from None
    if not isinstance(value, dict):
        raise InvalidRequest(
            "the body must be a JSON object",
            [_root(f"must be an object, got {type(value).__name__}")],
        )
    return value


def _root(reason: str) -> FieldError:
    return FieldError(path="body", reason=reason)


def reject_unknown_query(raw_event: Mapping[str, Any], allowed: Iterable[str]) -> None:
    unknown = sorted(set(raw_event.get("queryStringParameters") or {}) - set(allowed))
    if unknown:
        raise InvalidRequest(
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
        raise Unauthorized(
            "this route needs AWS SigV4 (IAM) authentication",
            [FieldError(path="header.authorization", reason="no IAM identity on the request")],
        )
    return arn


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


def install_error_handlers(app: APIGatewayHttpResolver, routes: Mapping[str, set[str]]) -> None:
    """`routes`: path pattern (`/jobs/{id}`) → methods, to tell 405 from 404."""
    compiled = [
        (re.compile("^" + re.sub(r"\{[^/]+\}", "[^/]+", pattern) + "$"), methods)
        for pattern, methods in routes.items()
    ]

    def _api_error(exc: ApiError) -> Response[Any]:
        logger.info("client error", extra={"error": exc.code, "status": int(exc.status)})
        return error_response(exc)

    def _validation(exc: RequestValidationError) -> Response[Any]:
        return error_response(InvalidRequest("the request is not valid", validation_details(exc)))

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
                    headers={"Allow": ", ".join(allowed)},
                )
            )
        return error_response(NotFound(f"no route {method} {path}"))

    def _unexpected(exc: Exception) -> Response[Any]:
        # Not a client mistake: log it with its trace, answer without one.
        logger.exception("unhandled error")
        return json_response(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            {"error": "internal", "message": "internal error; see the function's logs"},
        )

    app.exception_handler(ApiError)(_api_error)
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(Exception)(_unexpected)
