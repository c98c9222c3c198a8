"""The errors logic raises for its caller, and pydantic errors as `path: reason` lines.

`DomainError` and its kinds (invalid, unauthenticated, not found, conflict, unavailable) say what
went wrong in the domain's words; the HTTP API maps each kind to a status and an error code in
one table (`functions/api/http.py`), so no service knows about HTTP.

`FieldError` is the shape of every detail: `tether validate`, the HTTP API's 4xx `details` and
the agent's settings check use it, so a user sees one vocabulary everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails


class FieldError(BaseModel):
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class DomainError(Exception):
    """A request the domain refuses or cannot serve; `details` name the inputs at fault."""

    def __init__(self, message: str, details: Sequence[FieldError] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)


class Invalid(DomainError):
    """The input parsed but breaks a rule (a bad spec, cursor, state filter, page token)."""


class Unauthenticated(DomainError):
    """The caller did not prove who it is (no identity, or not this generation's token)."""


class NotFound(DomainError):
    """No such job (or nothing at that address)."""


class Conflict(DomainError):
    """The request contradicts the stored state (a job that has ended, a reused key)."""


class Unavailable(DomainError):
    """A dependency is down or not configured; trying again later may work."""


class LogsUnavailable(Unavailable):
    """The job's training logs cannot be read (Cloudflare secret unset, Cloudflare or R2 down)."""


def _path(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


_INF = float("inf")


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _reason(err: ErrorDetails) -> str:
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see examples/ for the accepted fields)"
    if kind in _TYPE_NAMES:
        got = type(err.get("input")).__name__
        return f"must be {_TYPE_NAMES[kind]} (got {got})"
    value = err.get("input")
    if isinstance(value, float) and value != value:  # NaN fails every bound; say so instead
        return "must be a finite number, not NaN"
    if kind == "finite_number" or (isinstance(value, float) and value in (_INF, -_INF)):
        return "must be a finite number, not infinity (1e400 is read as infinity)"
    if kind == "invalid_key":
        return f"field names must be strings (got {type(value).__name__})"
    if kind == "greater_than_equal":
        return f"must be ≥ {_num(ctx['ge'])}"
    if kind == "greater_than":
        return f"must be > {_num(ctx['gt'])}"
    if kind == "less_than_equal":
        return f"must be ≤ {_num(ctx['le'])}"
    if kind == "less_than":
        return f"must be < {_num(ctx['lt'])}"
    if kind == "string_too_short":
        n = ctx["min_length"]
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} item(s)"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "enum":
        return f"must be one of {ctx['expected']}"
    if kind == "string_pattern_mismatch":
        return f"does not match the expected format {ctx['pattern']}"
    if kind == "value_error":
        # Our own validators raise ValueError("..."): pydantic prefixes "Value error, ".
        return str(err["msg"]).removeprefix("Value error, ")
    return str(err["msg"])


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """Every error of `exc` as a FieldError, paths joined with dots, list indexes in brackets."""
    errors = []
    for err in exc.errors(include_url=False):
        loc: list[int | str] = [prefix] if prefix else []
        # Keys of a dict[str, X] field show up as a path part too, which is what we want.
        loc.extend(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        reason = _reason(err)
        if loc and loc[-1] == "[key]":  # a bad mapping key, e.g. `env: {1: x}`
            loc.pop()
            reason = f"key {reason}"
        errors.append(FieldError(path=_path(loc), reason=reason))
    return errors
