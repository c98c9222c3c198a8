"""`StoreBase`: the table name, client and `Table` every part of `JobStore` reads and writes
through, and the transaction Put they share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from functions.adapters.table import Table, serialize

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any


# Every request is built in `functions/adapters/table.py` and this package from records pydantic
# has validated, and DynamoDB validates what it receives; botocore's own check walks every
# nested attribute value of every call once more on the caller's CPU (the monitor makes ~20,000
# writes a run at 10,000 jobs: BENCHMARKS.md#monitor-at-scale). Connections: as many as the
# largest pool that shares the client (the monitor's 16 writers, `service.APPLY_WORKERS`);
# botocore's default of 10 would hold the other 6 back.
CLIENT_CONFIG = Config(parameter_validation=False, max_pool_connections=16)


class StoreBase:
    """The tether table's connection. `client=None` builds a default client; `sleep` waits
    between the retries of conflicted and throttled calls (`Table`)."""

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table_name = table_name
        self.client: DynamoDBClient = client or boto3.client("dynamodb", config=CLIENT_CONFIG)
        self._table = Table(table_name, self.client, sleep=sleep)

    def _put(self, item: dict[str, Any], *, condition: str | None = None) -> dict[str, Any]:
        """A Put of a transaction."""
        put: dict[str, Any] = {"TableName": self.table_name, "Item": serialize(item)}
        if condition is not None:
            put["ConditionExpression"] = condition
        return {"Put": put}
