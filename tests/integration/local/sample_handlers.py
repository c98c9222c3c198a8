"""Handlers of the sample stack's functions (tests/integration/local/sample_stack.py).

They behave like real handlers: configuration from the environment per invocation, DynamoDB
through boto3 (reaching moto through AWS_ENDPOINT_URL), failures as exceptions whose class names
the state machine's Retry and Catch match. `slow` outlives its 1 s timeout when asked to;
`count` keeps module-level state, as handlers' caches do, to show whose it is.
"""

from __future__ import annotations

import os
import time
from typing import Any

import boto3

_invocations = 0  # this execution environment's invocations (module state, like any cache)
# Load DynamoDB's service model during Init, as real handlers build their clients there: the
# handlers' own time (`slow` has 1 s) is then spent on their work, not on botocore's JSON.
boto3.client("dynamodb", region_name=os.environ.get("AWS_REGION", "us-east-1"))


class FlakyError(Exception):
    """A transient failure: the state machine retries it."""


class OfferGone(Exception):
    """A permanent failure: the state machine catches it and records it."""


def reserve(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Count this attempt in DynamoDB, then fail as the input asks or reserve a GPU."""
    table = boto3.resource("dynamodb").Table(os.environ["TABLE_NAME"])
    attempts = table.update_item(
        Key={"pk": f"order#{event['order_id']}", "sk": "attempts"},
        UpdateExpression="ADD attempts :one",
        ExpressionAttributeValues={":one": 1},
        ReturnValues="UPDATED_NEW",
    )["Attributes"]["attempts"]
    if event.get("gone"):
        raise OfferGone(f"offer for {event['order_id']} was rented by someone else")
    if int(attempts) <= int(event.get("fail_times", 0)):
        raise FlakyError(f"attempt {attempts} failed")
    return {"kind": event.get("kind", "gpu"), "attempts": int(attempts)}


def describe(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Report what this invocation sees: its environment and its Lambda context."""
    return {
        "color": os.environ.get("COLOR"),
        "table_name": os.environ.get("TABLE_NAME"),
        "function_name": context.function_name,
        "env_function_name": os.environ.get("AWS_LAMBDA_FUNCTION_NAME"),
        "remaining_ms_positive": context.get_remaining_time_in_millis() > 0,
        "variables": sorted(os.environ),
        "event": event,
    }


def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Sleep `sleep_s`, then record that the work went on (an item `slow#<id>`/`done`)."""
    time.sleep(float(event.get("sleep_s", 0)))
    table = boto3.resource("dynamodb").Table(os.environ["TABLE_NAME"])
    table.put_item(Item={"pk": f"slow#{event['id']}", "sk": "done"})
    return {"slept_s": event.get("sleep_s", 0)}


def count(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Count this invocation in a module global and mark os.environ; with `together: N`, wait
    (up to `wait_s`) until N invocations of the same `id` have arrived (a DynamoDB counter), so
    that they were provably in flight at once; then report what this environment holds."""
    global _invocations
    _invocations += 1
    os.environ["SAMPLE_MARK"] = str(event.get("mark", ""))
    together = int(event.get("together", 1))
    table = boto3.resource("dynamodb").Table(os.environ["TABLE_NAME"])
    arrived = table.update_item(
        Key={"pk": f"barrier#{event['id']}", "sk": "arrivals"},
        UpdateExpression="ADD arrivals :one",
        ExpressionAttributeValues={":one": 1},
        ReturnValues="UPDATED_NEW",
    )["Attributes"]["arrivals"]
    deadline = time.monotonic() + float(event.get("wait_s", 0))
    while int(arrived) < together and time.monotonic() < deadline:
        time.sleep(0.05)
        item = table.get_item(Key={"pk": f"barrier#{event['id']}", "sk": "arrivals"})["Item"]
        arrived = item["arrivals"]
    return {
        "invocations": _invocations,
        "mark": os.environ.get("SAMPLE_MARK"),
        "together": int(arrived) >= together,
        "pid": os.getpid(),
    }


def crash(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """End the execution environment's process without answering (as a segfault would)."""
    if event.get("crash"):
        os._exit(3)
    return {"alive": True}
