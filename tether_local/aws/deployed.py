"""What deploying a template on `LocalAws` produced: logical ids → physical names and ARNs,
resolved outputs, and the schedules and HTTP routes that the local stack's clock and API front
serve (moto runs neither)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ACCOUNT_ID = "123456789012"  # moto's default account


@dataclass(frozen=True)
class Schedule:
    """An EventBridge schedule (or scheduled rule target), for the local clock to fire."""

    logical_id: str
    name: str
    expression: str
    interval_s: float | None  # rate(...) in seconds; None for cron/at expressions
    target_arn: str
    input: str | None
    enabled: bool


@dataclass(frozen=True)
class Throttle:
    """A route's token bucket, as the stage's route settings give it: `rate_per_s` tokens a
    second into a bucket of `burst`; a request that finds it empty gets 429."""

    rate_per_s: float
    burst: int


@dataclass(frozen=True)
class HttpRoute:
    """An API Gateway HTTP API route and the function behind it, for a local HTTP front."""

    route_key: str  # "POST /jobs/{id}/cancel" or "$default"
    function_arn: str
    authorization_type: str  # NONE, AWS_IAM, JWT, CUSTOM
    payload_format_version: str
    throttle: Throttle | None = None  # None: the stage throttles nothing (no settings)


@dataclass(frozen=True)
class DeployedResource:
    logical_id: str
    type: str
    physical_id: str  # what Ref returns
    attributes: Mapping[str, Any]
    created: bool  # False: recorded only (roles, policies, log groups, unknown types)


@dataclass
class Deployed:
    """A template deployed on LocalAws: logical ids → physical names/ARNs, resolved outputs."""

    stack_name: str
    resources: dict[str, DeployedResource]
    outputs: dict[str, Any]
    schedules: list[Schedule]
    http_routes: list[HttpRoute] = field(default_factory=list)

    def resource(self, logical_id: str, type_: str | None = None) -> DeployedResource:
        """By exact logical id, or by the construct id CDK suffixed with an 8-hex-digit hash."""
        candidates = [r for r in self.resources.values() if type_ in (None, r.type)]
        exact = [r for r in candidates if r.logical_id == logical_id]
        if exact:
            return exact[0]
        pattern = re.compile(re.escape(logical_id) + r"[0-9A-F]{8}")
        matches = [r for r in candidates if pattern.fullmatch(r.logical_id)]
        if len(matches) == 1:
            return matches[0]
        kind = f" of type {type_}" if type_ else ""
        found = ", ".join(r.logical_id for r in matches) or "none"
        raise KeyError(f"no single resource{kind} with logical id {logical_id!r} (found {found})")

    def table_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable")

    def function_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::Lambda::Function")

    def function_arn(self, logical_id: str) -> str:
        return str(self.resource(logical_id, "AWS::Lambda::Function").attributes["Arn"])

    def state_machine_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::StepFunctions::StateMachine")

    def topic_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::SNS::Topic")

    def secret_arn(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::SecretsManager::Secret")

    def bucket_name(self, logical_id: str) -> str:
        return self._physical(logical_id, "AWS::S3::Bucket")

    def _physical(self, logical_id: str, *types_: str) -> str:
        for type_ in types_:
            with contextlib.suppress(KeyError):
                return self.resource(logical_id, type_).physical_id
        return self.resource(logical_id, types_[0]).physical_id  # raises, naming the id


__all__ = ["ACCOUNT_ID", "Deployed", "DeployedResource", "HttpRoute", "Schedule", "Throttle"]
