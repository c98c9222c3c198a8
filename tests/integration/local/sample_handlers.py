"""Handlers of the sample stack's two functions (tests/integration/local/sample_stack.py).

They behave like real handlers: configuration from the environment per invocation, DynamoDB
through boto3 (reaching moto through AWS_ENDPOINT_URL), failures as exceptions whose class names
the state machine's Retry and Catch match.
"""

from __future__ import annotations

import os
from typing import Any

import boto3


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
        "event": event,
    }
