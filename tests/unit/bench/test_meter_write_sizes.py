"""The meter bills a write by the larger of the item's size before and after it, as DynamoDB
does, reading both from moto's store around the call (bench/lib/meter.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from bench.lib.meter import AwsMeter
from functions.adapters.table import create_table

TABLE = "meter-sizes"
KEY = {"pk": {"S": "JOB#1"}, "sk": {"S": "GEN#0001"}}


@pytest.fixture
def metered() -> Iterator[tuple[AwsMeter, Any]]:
    with mock_aws():
        meter = AwsMeter().install(time_moto=False)  # before the client: it copies the hooks
        client = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(client, TABLE)
        try:
            yield meter, client
        finally:
            meter.uninstall()


def set_text(client: Any, key: dict[str, Any], text: str) -> None:
    client.update_item(
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": "text"},
        ExpressionAttributeValues={":t": {"S": text}},
    )


def test_an_update_that_grows_the_item_bills_its_size_after(
    metered: tuple[AwsMeter, Any],
) -> None:
    meter, client = metered
    set_text(client, KEY, "x" * 2100)  # a new item of ~2.1 KB, never seen before
    assert meter.write_units == 3


def test_a_small_update_of_a_large_item_bills_the_whole_item(
    metered: tuple[AwsMeter, Any],
) -> None:
    meter, client = metered
    client.put_item(TableName=TABLE, Item={**KEY, "payload": {"S": "y" * 5000}})
    assert meter.write_units == 5
    set_text(client, KEY, "z")
    assert meter.write_units == 10  # 50 bytes written, 5 KB billed
    set_text(client, {"pk": KEY["pk"], "sk": {"S": "GEN#0001#HB"}}, "z")
    assert meter.write_units == 11  # a small item: one unit


def test_transactional_writes_and_deletes_use_the_stored_sizes(
    metered: tuple[AwsMeter, Any],
) -> None:
    meter, client = metered
    client.put_item(TableName=TABLE, Item={**KEY, "payload": {"S": "y" * 3000}})
    client.transact_write_items(
        TransactItems=[
            {"Update": {"TableName": TABLE, "Key": KEY, "UpdateExpression": "REMOVE payload"}}
        ]
    )
    assert meter.write_units == 3 + 3 * 2  # the larger (before) size, twice
    client.delete_item(TableName=TABLE, Key=KEY)
    assert meter.write_units == 3 + 6 + 1  # the item is small by then
