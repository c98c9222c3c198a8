"""The store's own DynamoDB client skips botocore's client-side parameter check: its requests
are built from validated records (functions/adapters/store_base.py), and DynamoDB checks them."""

from __future__ import annotations

import boto3
import pytest

from functions.adapters.store import JobStore


def test_the_default_client_does_not_validate_parameters_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = JobStore("tether-test")
    assert store.client.meta.config.parameter_validation is False
    given = boto3.client("dynamodb")
    assert JobStore("tether-test", client=given).client is given  # a given client is kept
