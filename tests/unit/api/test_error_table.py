"""The one table that maps errors to HTTP statuses and codes (functions/api/http.py): each kind
of domain error, and each error only HTTP has, to the status and code clients see."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from functions.api.http import (
    MalformedJson,
    MethodNotAllowed,
    PayloadTooLarge,
    UnsupportedMediaType,
    status_of,
)
from functions.domain.errors import (
    Conflict,
    DomainError,
    Invalid,
    LogsUnavailable,
    NotFound,
    Unauthenticated,
    Unavailable,
)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (Invalid("x"), 400, "invalid_request"),
        (MalformedJson("x"), 400, "malformed_json"),
        (Unauthenticated("x"), 401, "unauthorized"),
        (NotFound("x"), 404, "not_found"),
        (MethodNotAllowed("x"), 405, "method_not_allowed"),
        (Conflict("x"), 409, "conflict"),
        (PayloadTooLarge("x"), 413, "payload_too_large"),
        (UnsupportedMediaType("x"), 415, "unsupported_media_type"),
        (Unavailable("x"), 503, "unavailable"),
        (LogsUnavailable("x"), 503, "logs_unavailable"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v),
)
def test_each_error_has_its_status_and_code(error: DomainError, status: int, code: str) -> None:
    assert status_of(error) == (HTTPStatus(status), code)


def test_a_subclass_takes_its_nearest_entry() -> None:
    class CursorOutOfRange(Invalid):
        pass

    assert status_of(CursorOutOfRange("x")) == (HTTPStatus.BAD_REQUEST, "invalid_request")
