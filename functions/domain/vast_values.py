"""Odd values in Vast's records, made readable before a model validates them (pure).

Vast's records are less regular than its docs. Listings carry `gpu_util: "n/a"` and empty
strings where a number is missing, numbers as strings (ids such as `"31051696"`, prices such as
`"0.35"`), dates as ISO strings where the docs promise epoch seconds, and labels as numbers. A
model that refuses such a value refuses the whole record, and a listing parsed in one piece then
fails on every run. `normalise` brings each declared field of one record to the kind its model
expects:

- text that means "no value" ("", "n/a", "none", "null", …) in a number field → the field is
  missing (its default applies);
- "" in a text field → missing;
- a number written as text → the number (an int field takes only whole numbers, `3.0` as 3);
- an ISO date in an epoch field → epoch seconds (a date without a zone is UTC);
- a number in a text field (a label `12345`) → its text.

Anything else is left as it is, for the model to accept or refuse: what still fails is the
caller's to skip and count (`functions/adapters/vast.py`). Undeclared fields are kept untouched.
"""

from __future__ import annotations

import math
import types
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

MISSING_TEXT = frozenset({"", "n/a", "na", "none", "null", "nan", "-", "--", "?"})
EPOCH_FIELDS = frozenset({"start_date", "end_date"})

Kind = Literal["int", "float", "str", "other"]


def field_kind(annotation: Any) -> Kind:
    """The kind a field's annotation asks for: `int | None` → "int", `float` → "float",
    `str | None` → "str"; anything else (bool, unions of kinds, models) → "other"."""
    members = (
        get_args(annotation)
        if get_origin(annotation) in (Union, types.UnionType)
        else (annotation,)
    )
    kinds = {m for m in members if m is not type(None)}
    if kinds == {int}:
        return "int"
    if kinds in ({float}, {int, float}):
        return "float"
    if kinds == {str}:
        return "str"
    return "other"


def normalise(
    record: Mapping[str, Any],
    model: type[BaseModel],
    *,
    epoch_fields: Collection[str] = EPOCH_FIELDS,
) -> dict[str, Any]:
    """A copy of `record` whose declared fields carry the kinds `model` expects (see the module
    docstring). A field whose value means "missing" is left out, so the model's default
    applies."""
    result = dict(record)
    for name, info in model.model_fields.items():
        if name not in result:
            continue
        value = _normalised(result[name], field_kind(info.annotation), name in epoch_fields)
        if value is _MISSING:
            del result[name]
        else:
            result[name] = value
    return result


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def _normalised(value: Any, kind: Kind, epoch: bool) -> Any:
    if kind == "str":
        if isinstance(value, str) and not value.strip():
            return _MISSING
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        return value
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind not in ("int", "float") or not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in MISSING_TEXT:
        return _MISSING
    number = _number(text)
    if number is None and epoch:
        number = _epoch(text)
    if number is None:
        return value  # the model refuses it: the caller skips the record or the field
    if kind == "int":
        return int(number) if number.is_integer() else value
    return number


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _epoch(text: str) -> float | None:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


__all__ = ["EPOCH_FIELDS", "MISSING_TEXT", "field_kind", "normalise"]
