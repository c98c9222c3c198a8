"""The API's request bodies as domain types: a job submission (`functions/domain/submission.py`)
and a code upload request (`functions/domain/code_archive.py`), or `Invalid` naming each field."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.code_archive import UploadRequest, parse_upload_request
from functions.domain.errors import Invalid
from functions.domain.submission import parse_submission
from tests.unit.domain.builders import SPEC

SHA = "ab" * 32


def test_a_valid_body_is_its_spec_and_the_hash_of_the_body_as_sent() -> None:
    submission = parse_submission(dict(SPEC))
    assert submission.spec.name == "t"
    assert submission.spec.budget_usd == 10
    # sha256 of '{"budget_usd":10,"expected_hours":1,"image":"python:3.12","name":"t",
    # "run":"python train.py"}': keys sorted, no spaces (what earlier deployments stored).
    assert (
        submission.request_sha256
        == "8c5104de543a5566759d31ca5bb400891457594124140e5372dd154a4fb9ffe6"
    )


def test_the_hash_ignores_key_order_and_keeps_text_as_utf8() -> None:
    reordered = dict(reversed(list((SPEC | {"run": "echo é"}).items())))
    assert (
        parse_submission(reordered).request_sha256
        == "b96fd76f141dfdc855071a912ad9c0b52ebf357d6db8f47746dbc47d86a82738"
    )


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"budget_usd": -1}, "budget_usd"),
        ({"colour": "red"}, "colour"),
        ({"resources": {"gpus": 2}}, "resources.gpus"),
    ],
)
def test_a_bad_spec_is_invalid_naming_the_field(overrides: dict[str, Any], path: str) -> None:
    with pytest.raises(Invalid) as caught:
        parse_submission(SPEC | overrides)
    assert caught.value.message == "the job spec is not valid"
    assert path in [d.path for d in caught.value.details]


def test_a_valid_upload_request_is_parsed() -> None:
    assert parse_upload_request({"sha256": SHA, "size_bytes": 10}) == UploadRequest(
        sha256=SHA, size_bytes=10
    )


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"sha256": "AB" * 32, "size_bytes": 10}, "sha256"),
        ({"sha256": SHA, "size_bytes": 0}, "size_bytes"),
        ({"sha256": SHA, "size_bytes": "10"}, "size_bytes"),
        ({"sha256": SHA}, "size_bytes"),
        ({"sha256": SHA, "size_bytes": 10, "name": "x"}, "name"),
    ],
)
def test_a_bad_upload_request_is_invalid_naming_the_field(body: dict[str, Any], path: str) -> None:
    with pytest.raises(Invalid) as caught:
        parse_upload_request(body)
    assert caught.value.message == "the upload request is not valid"
    assert [d.path for d in caught.value.details] == [path]
