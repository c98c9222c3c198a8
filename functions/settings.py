"""Each function's environment as a pydantic model, checked at cold start.

The CDK construct that owns a resource fills the variable from it (`infra/constructs/`); the
names below are the only spelling of those variables (`infra/names.py` re-exports them for the
stack and the tests). A missing or malformed variable fails the cold start with every problem
named, instead of a KeyError on the first request.

A field several functions read is spelled once: in a base the functions' models extend
(`_Settings` for every function, `_CloudflareEndpoints`, `ProviderSettings` for the functions
that call Vast and Cloudflare), or, where the functions differ in its default, as an `Annotated`
type each declares with its own default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.domain.errors import field_errors

TABLE_NAME_ENV = "TETHER_TABLE_NAME"
STATE_MACHINE_ARN_ENV = "TETHER_STATE_MACHINE_ARN"
SUPERVISED_MAX_AGE_ENV = "TETHER_SUPERVISED_MAX_AGE_S"
MAX_BODY_BYTES_ENV = "TETHER_MAX_BODY_BYTES"
IDEMPOTENCY_TTL_ENV = "TETHER_IDEMPOTENCY_TTL_S"
VAST_SECRET_ARN_ENV = "TETHER_VAST_SECRET_ARN"  # noqa: S105 (a name, not a secret)
CLOUDFLARE_SECRET_ARN_ENV = "TETHER_CLOUDFLARE_SECRET_ARN"  # noqa: S105 (a name, not a secret)
VAST_BASE_URL_ENV = "TETHER_VAST_BASE_URL"
VAST_DEADLINE_ENV = "TETHER_VAST_DEADLINE_S"
VAST_TIMEOUT_ENV = "TETHER_VAST_TIMEOUT_S"
CLOUDFLARE_BASE_URL_ENV = "TETHER_CLOUDFLARE_BASE_URL"
R2_ENDPOINT_ENV = "TETHER_R2_ENDPOINT"
ARTIFACTS_BUCKET_ENV = "TETHER_ARTIFACTS_BUCKET"
AGENT_WHEEL_PREFIX = "agent/"  # where the deploy puts the agent wheel in that bucket
API_URL_ENV = "TETHER_API_URL"
MONITOR_INTERVAL_ENV = "TETHER_MONITOR_INTERVAL_S"
MONITOR_SHARDS_ENV = "TETHER_MONITOR_SHARDS"
JOB_EVENTS_TOPIC_ARN_ENV = "TETHER_JOB_EVENTS_TOPIC_ARN"
# Powertools reads these two itself; the stack sets them from one place (infra/names.py).
SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"


class SettingsError(RuntimeError):
    """The function's environment is incomplete or wrong: a deployment mistake."""


ARN_PATTERN = r"^arn:aws[a-z-]*:"

# Fields of several functions, each spelled once. A function that needs its own default says so
# where it declares the field (`max_body_bytes: MaxBodyBytes = 160 * 1024`).
StateMachineArn = Annotated[
    str, Field(alias=STATE_MACHINE_ARN_ENV, pattern=ARN_PATTERN + r"states:[a-z0-9-]+:\d{12}:")
]
JobEventsTopicArn = Annotated[
    str | None,
    Field(
        alias=JOB_EVENTS_TOPIC_ARN_ENV,
        pattern=ARN_PATTERN + "sns:",
        description="Where job transition events go; unset: not published.",
    ),
]
CloudflareSecretArn = Annotated[str, Field(alias=CLOUDFLARE_SECRET_ARN_ENV, pattern=ARN_PATTERN)]
MaxBodyBytes = Annotated[int, Field(alias=MAX_BODY_BYTES_ENV, ge=1024)]
VastDeadlineS = Annotated[
    float, Field(alias=VAST_DEADLINE_ENV, gt=0, description="How long one Vast call retries.")
]
VastTimeoutS = Annotated[
    float, Field(alias=VAST_TIMEOUT_ENV, gt=0, description="One Vast request's timeout.")
]


class _Settings(BaseModel):
    """What every function reads: the base of each function's model."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    service_name: str = Field(alias=SERVICE_NAME_ENV, min_length=1)
    metrics_namespace: str = Field(alias=METRICS_NAMESPACE_ENV, min_length=1)
    table_name: str = Field(alias=TABLE_NAME_ENV, min_length=3, max_length=255)


class _CloudflareEndpoints(_Settings):
    """Where a function that reaches Cloudflare or R2 sends its requests (the account's key:
    its own `cloudflare_secret_arn`, required or not)."""

    cloudflare_base_url: str = Field(
        default="https://api.cloudflare.com/client/v4",
        alias=CLOUDFLARE_BASE_URL_ENV,
        pattern=r"^https?://",
    )
    r2_endpoint: str | None = Field(
        default=None,
        alias=R2_ENDPOINT_ENV,
        pattern=r"^https?://",
        description="Default: https://<account_id>.r2.cloudflarestorage.com",
    )


class JobsApiSettings(_CloudflareEndpoints):
    state_machine_arn: StateMachineArn
    max_body_bytes: MaxBodyBytes = 256 * 1024
    idempotency_ttl_s: int = Field(default=24 * 3600, alias=IDEMPOTENCY_TTL_ENV, ge=60)
    job_events_topic_arn: JobEventsTopicArn = None
    # Code archives (POST /code/uploads, and POST /jobs with `code.archive`): R2 through
    # credentials minted from the Cloudflare secret. Unset: such jobs are refused (503).
    cloudflare_secret_arn: str | None = Field(
        default=None, alias=CLOUDFLARE_SECRET_ARN_ENV, pattern=ARN_PATTERN
    )


class HeartbeatSettings(_Settings):
    supervised_max_age_s: float = Field(
        default=180,
        alias=SUPERVISED_MAX_AGE_ENV,
        gt=0,
        description="About three monitor intervals: a generation whose `supervised_at` (the "
        "last monitor run that completed its job's evaluation) is older gets no new lease.",
    )
    # Every heartbeat the contract admits fits, as the agent encodes it (httpx: UTF-8, control
    # characters as `\u00XX`): at most 147 KB, 16 skipped restore candidates with 1024-character
    # keys and 300-character reasons, two checkpoint references and a GPU error, every character
    # a control character; 26 KB when all are ASCII. A valid heartbeat refused for its size
    # would be refused every time, and the host would be lost to it.
    max_body_bytes: MaxBodyBytes = 160 * 1024


class LogsApiSettings(_CloudflareEndpoints):
    """GET /jobs/{id}/logs: reads the job's log segments in R2 with read-only credentials."""

    cloudflare_secret_arn: CloudflareSecretArn


class ProviderSettings(_CloudflareEndpoints):
    """Where the account-wide keys live (SSM SecureString ARNs) and which endpoints to call: the
    settings of the functions that call Vast and Cloudflare (`functions.adapters.factory.
    Providers` builds their clients from them)."""

    vast_secret_arn: str = Field(alias=VAST_SECRET_ARN_ENV, pattern=ARN_PATTERN)
    cloudflare_secret_arn: CloudflareSecretArn
    vast_base_url: str = Field(
        default="https://console.vast.ai", alias=VAST_BASE_URL_ENV, pattern=r"^https?://"
    )
    monitor_interval_s: float = Field(default=60, alias=MONITOR_INTERVAL_ENV, gt=0)
    vast_deadline_s: VastDeadlineS = 30
    vast_timeout_s: VastTimeoutS = 20


class MonitorSettings(ProviderSettings):
    state_machine_arn: StateMachineArn
    monitor_shards: int = Field(
        default=1,
        alias=MONITOR_SHARDS_ENV,
        ge=1,
        le=16,
        description="How many schedules split the fleet by job hash; each invocation names its "
        'shard in the event (`{"shard": k}`).',
    )


class LifecycleSettings(ProviderSettings):
    # Shorter than the monitor's: the state machine retries a failed call itself, and the
    # provision step must fit its worst case in the function's timeout
    # (functions/lifecycle/provision.py, "The step's time budget").
    vast_deadline_s: VastDeadlineS = 20
    vast_timeout_s: VastTimeoutS = 10
    artifacts_bucket: str = Field(alias=ARTIFACTS_BUCKET_ENV, min_length=3, max_length=63)
    api_url: str = Field(alias=API_URL_ENV, pattern=r"^https?://")
    job_events_topic_arn: JobEventsTopicArn = None


S = TypeVar("S", bound=_Settings)


def load_settings(model: type[S], environ: Mapping[str, str] | None = None) -> S:
    env = os.environ if environ is None else environ
    try:
        return model.model_validate(dict(env))
    except ValidationError as exc:
        problems = "; ".join(str(e) for e in field_errors(exc))
        raise SettingsError(f"{model.__name__}: environment is not usable: {problems}") from None
