"""The API handlers under moto: the table is created from the same definition the stack uses."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.adapters import factory
from functions.adapters.store import JobStore
from functions.adapters.table import create_table
from functions.api import heartbeat, jobs
from functions.settings import (
    METRICS_NAMESPACE_ENV,
    SERVICE_NAME_ENV,
    STATE_MACHINE_ARN_ENV,
    TABLE_NAME_ENV,
)
from tether_local.aws.apigw import LocalLambdaContext, http_api_event

TABLE = "tether-test"
PASS_DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}})


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Api:
    store: JobStore
    clock: Clock
    state_machine_arn: str
    sfn: Any

    def call(self, handler: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> Reply:
        result = handler(http_api_event(*args, **kwargs), LocalLambdaContext())
        raw = result.get("body") or ""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        return Reply(result["statusCode"], body, dict(result.get("headers") or {}))

    def jobs(self, *args: Any, **kwargs: Any) -> Reply:
        return self.call(jobs.handler, *args, **kwargs)

    def heartbeat(self, *args: Any, **kwargs: Any) -> Reply:
        return self.call(heartbeat.handler, *args, **kwargs)

    def items(self) -> list[dict[str, Any]]:
        """Every item in the table, in a stable order (to prove a rejection stored nothing)."""
        items = self.store.client.scan(TableName=TABLE)["Items"]
        return sorted(items, key=lambda i: (i["pk"]["S"], i["sk"]["S"]))

    def executions(self) -> list[str]:
        reply = self.sfn.list_executions(stateMachineArn=self.state_machine_arn)
        return sorted(e["name"] for e in reply["executions"])


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with mock_aws():
        ddb = boto3.client("dynamodb")
        create_table(ddb, TABLE)
        sfn = boto3.client("stepfunctions")
        arn = sfn.create_state_machine(
            name="tether-lifecycle",
            definition=PASS_DEFINITION,
            roleArn="arn:aws:iam::123456789012:role/lifecycle",
        )["stateMachineArn"]
        for key, value in {
            TABLE_NAME_ENV: TABLE,
            STATE_MACHINE_ARN_ENV: arn,
            SERVICE_NAME_ENV: "tether-test",
            METRICS_NAMESPACE_ENV: "TetherTest",
        }.items():
            monkeypatch.setenv(key, value)
        clock = Clock()
        # The handlers' seam: fresh dependencies (a cold start) and this test's clock.
        factory.install_hooks(factory.Hooks(clock=clock))
        yield Api(store=JobStore(TABLE, ddb), clock=clock, state_machine_arn=arn, sfn=sfn)
        factory.reset()
