"""The store's own DynamoDB client skips botocore's client-side parameter check (its requests
are built from validated records, and DynamoDB checks them) and holds a connection for each of
the monitor's writers (functions/adapters/store_base.py)."""

from __future__ import annotations

import boto3
import pytest
from botocore.validate import ParamValidationDecorator

from functions.adapters.store import JobStore
from functions.monitor import service


def test_the_default_client_does_not_validate_parameters_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = JobStore("tether-test")
    # botocore wraps the request serializer in its validator only while validation is on
    assert not isinstance(store.client._serializer, ParamValidationDecorator)
    checked = boto3.client("dynamodb")
    assert isinstance(checked._serializer, ParamValidationDecorator)
    # as many connections as the monitor's write pool has threads
    assert store.client.meta.config.max_pool_connections >= service.APPLY_WORKERS
    given = boto3.client("dynamodb")
    assert JobStore("tether-test", client=given).client is given  # a given client is kept
