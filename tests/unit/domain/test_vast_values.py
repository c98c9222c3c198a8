"""Odd values in Vast's records are made readable before a model sees them, and an offer
without a price is not an offer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from functions.domain.offer import Offer
from functions.domain.vast_values import field_kind, normalise


class Record(BaseModel):
    id: int
    label: str | None = None
    gpu_util: float | None = None
    count: int = 0
    start_date: float | None = None
    rentable: bool | None = None


@pytest.mark.parametrize(
    ("field", "sent", "read"),
    [
        ("gpu_util", "n/a", None),
        ("gpu_util", "N/A", None),
        ("gpu_util", "", None),
        ("gpu_util", " null ", None),
        ("gpu_util", "-", None),
        ("gpu_util", "97.5", 97.5),
        ("gpu_util", "nan", None),
        ("id", "31051696", 31051696),
        ("id", 31051696.0, 31051696),
        ("count", "3", 3),
        ("count", "n/a", 0),  # missing: the default applies
        ("label", 12345, "12345"),
        ("label", "", None),
        ("start_date", "2026-09-09T08:53:08+00:00", 1_788_943_988.0),
        ("start_date", "2026-09-09T08:53:08Z", 1_788_943_988.0),
        ("start_date", "2026-09-09 08:53:08", 1_788_943_988.0),  # no zone: UTC
        ("start_date", "1788943988.5", 1_788_943_988.5),
        ("rentable", "true", True),
    ],
)
def test_odd_values_are_read_as_the_model_expects(field: str, sent: Any, read: Any) -> None:
    record = {"id": 1, field: sent}
    assert getattr(Record.model_validate(normalise(record, Record)), field) == read


@pytest.mark.parametrize(
    ("field", "sent"),
    [
        ("id", "abc"),
        ("id", "3.5"),
        ("gpu_util", "busy"),
        ("start_date", "yesterday"),
        ("label", ["a"]),
    ],
)
def test_values_that_cannot_be_read_are_left_for_the_model_to_refuse(field: str, sent: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        Record.model_validate(normalise({"id": 1, field: sent}, Record))
    assert [e["loc"][0] for e in raised.value.errors()] == [field]


def test_undeclared_fields_and_the_input_are_left_alone() -> None:
    record = {"id": "1", "gpu_temp": "n/a", "extra_env": [["A", "1"]]}
    assert normalise(record, Record) == {"id": 1, "gpu_temp": "n/a", "extra_env": [["A", "1"]]}
    assert record["id"] == "1"


@pytest.mark.parametrize(
    ("annotation", "kind"),
    [(int, "int"), (int | None, "int"), (float, "float"), (float | None, "float"),
     (str | None, "str"), (bool | None, "other"), (int | str, "other")],
)  # fmt: skip
def test_field_kinds(annotation: Any, kind: str) -> None:
    assert field_kind(annotation) == kind


# -- offers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prices",
    [{}, {"dph_total": None, "dph_base": None}, {"dph_total": "n/a", "dph_base": ""}],
)
def test_an_offer_without_a_price_is_not_an_offer(prices: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="without a price"):
        Offer.model_validate({"id": 1, "gpu_name": "RTX 4090", **prices})


def test_an_offer_priced_by_either_figure_is_one() -> None:
    assert Offer.model_validate({"id": 1, "dph_base": 0.3}).dph_total == 0.3
    assert Offer.model_validate({"id": 1, "dph_total": "0.41"}).usd_per_hour(0) == 0.41


def test_an_offer_id_must_be_a_positive_whole_number() -> None:
    assert Offer.model_validate({"id": "31732048", "dph_base": 0.3}).id == 31732048
    for bad in (True, 0, "x"):
        with pytest.raises(ValidationError):
            Offer.model_validate({"id": bad, "dph_base": 0.3})
