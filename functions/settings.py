"""Each function's environment as a pydantic model, checked at cold start.

The CDK construct that owns a resource fills the variable from it (`infra/constructs/`); the
names below are the only spelling of those variables (`infra/names.py` re-exports them for the
stack and the tests). A missing or malformed variable fails the cold start with every problem
named, instead of a KeyError on the first request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.domain.errors import field_errors

TABLE_NAME_ENV = "TETHER_TABLE_NAME"
STATE_MACHINE_ARN_ENV = "TETHER_STATE_MACHINE_ARN"
PULSE_MAX_AGE_ENV = "TETHER_PULSE_MAX_AGE_S"
MAX_BODY_BYTES_ENV = "TETHER_MAX_BODY_BYTES"
IDEMPOTENCY_TTL_ENV = "TETHER_IDEMPOTENCY_TTL_S"
# Powertools reads these two itself; the stack sets them from one place (infra/names.py).
SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


class SettingsError(RuntimeError):
    """The function's environment is incomplete or wrong: a deployment mistake."""


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    service_name: str = Field(alias=SERVICE_NAME_ENV, min_length=1)
    metrics_namespace: str = Field(alias=METRICS_NAMESPACE_ENV, min_length=1)
    table_name: str = Field(alias=TABLE_NAME_ENV, min_length=3, max_length=255)


class JobsApiSettings(_Settings):
    state_machine_arn: str = Field(
        alias=STATE_MACHINE_ARN_ENV, pattern=r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:"
    )
    max_body_bytes: int = Field(default=256 * 1024, alias=MAX_BODY_BYTES_ENV, ge=1024)
    idempotency_ttl_s: int = Field(default=24 * 3600, alias=IDEMPOTENCY_TTL_ENV, ge=60)


class HeartbeatSettings(_Settings):
    pulse_max_age_s: float = Field(
        default=180,
        alias=PULSE_MAX_AGE_ENV,
        gt=0,
        description="About three monitor intervals: older than this, the supervisor is dead.",
    )
    max_body_bytes: int = Field(default=16 * 1024, alias=MAX_BODY_BYTES_ENV, ge=1024)


S = TypeVar("S", bound=_Settings)


def load_settings(model: type[S], environ: Mapping[str, str] | None = None) -> S:
    env = os.environ if environ is None else environ
    try:
        return model.model_validate(dict(env))
    except ValidationError as exc:
        problems = "; ".join(str(e) for e in field_errors(exc))
        raise SettingsError(f"{model.__name__}: environment is not usable: {problems}") from None
