"""Names the stack, the tests, the CLI and the local stack share: construct ids, outputs, env.

Environment variable names are defined next to the settings models that read them
(`functions/settings.py`, which the Lambda asset carries) and re-exported here.
"""

from __future__ import annotations

from functions.settings import (
    AGENT_WHEEL_PREFIX,
    API_URL_ENV,
    ARTIFACTS_BUCKET_ENV,
    CLOUDFLARE_SECRET_ARN_ENV,
    IDEMPOTENCY_TTL_ENV,
    JOB_EVENTS_TOPIC_ARN_ENV,
    MAX_BODY_BYTES_ENV,
    METRICS_NAMESPACE_ENV,
    MONITOR_INTERVAL_ENV,
    MONITOR_SHARDS_ENV,
    SERVICE_NAME_ENV,
    STATE_MACHINE_ARN_ENV,
    SUPERVISED_MAX_AGE_ENV,
    TABLE_NAME_ENV,
    VAST_SECRET_ARN_ENV,
)

STACK_NAME = "Tether"
SERVICE_NAME = "tether"
METRICS_NAMESPACE = "Tether"

# Construct ids (one per concern; the same words as functions/ and tests/).
DATA_ID = "Data"
SECRETS_ID = "Secrets"
ARTIFACTS_ID = "Artifacts"
API_ID = "Api"
LIFECYCLE_ID = "Lifecycle"
JOBS_FUNCTION_ID = "JobsFunction"
HEARTBEAT_FUNCTION_ID = "HeartbeatFunction"
MONITOR_ID = "Monitor"
MONITOR_FUNCTION_ID = "MonitorFunction"
MONITOR_SCHEDULE_ID = "Schedule"
LIFECYCLE_FUNCTION_ID = "LifecycleFunction"
NOTIFICATIONS_TOPIC_ID = "Notifications"
JOB_EVENTS_ID = "JobEvents"  # the topic of structured job transition events

# Lambda handlers (module path inside the asset, which holds only functions/ and its deps).
JOBS_HANDLER = "functions.api.jobs.handler"
HEARTBEAT_HANDLER = "functions.api.heartbeat.handler"
MONITOR_HANDLER = "functions.monitor.handler.handler"
LIFECYCLE_HANDLER = "functions.lifecycle.handler.handler"
# The functions X-Ray does not trace (tracing off, `POWERTOOLS_TRACE_DISABLED`: their tracer
# patches nothing; infra/constructs/function.py). Lambda samples the first request of every
# second, at $5 a million traces: a heartbeat per job every 15 s would cost $0.0012 a job-hour,
# as much as the rest of a job-hour's bill, and the minutely monitor $0.22 of an idle month.
# Their log lines say how each went. `bench/cold_start.py` imports them the same way.
UNTRACED_HANDLERS = frozenset({HEARTBEAT_HANDLER, MONITOR_HANDLER})
UNTRACED_ENV = {"POWERTOOLS_TRACE_DISABLED": "true"}  # what their environment adds

# Stack outputs (logical ids = export-free output names the CLI reads).
OUTPUT_API_URL = "ApiUrl"
OUTPUT_TABLE_NAME = "TableName"
OUTPUT_ARTIFACTS_BUCKET = "ArtifactsBucketName"
OUTPUT_STATE_MACHINE_ARN = "StateMachineArn"
OUTPUT_NOTIFICATIONS_TOPIC_ARN = "NotificationsTopicArn"
OUTPUT_JOB_EVENTS_TOPIC_ARN = "JobEventsTopicArn"
OUTPUT_MONITOR_SHARDS = "MonitorShards"  # what `tether deploy` keeps unless told otherwise
# Each function's reserved concurrency, kept by `tether deploy` the same way.
OUTPUT_MONITOR_CONCURRENCY = "MonitorConcurrency"
OUTPUT_LIFECYCLE_CONCURRENCY = "LifecycleConcurrency"
OUTPUT_HEARTBEAT_CONCURRENCY = "HeartbeatConcurrency"
OUTPUT_JOBS_CONCURRENCY = "JobsConcurrency"
# Where the provider keys live (stack outputs: the parameters' names).
OUTPUT_VAST_SECRET_ARN = "VastKeyParameter"  # noqa: S105 (a name, not a secret)
OUTPUT_CLOUDFLARE_SECRET_ARN = "CloudflareParameter"  # noqa: S105 (a name, not a secret)

# The provider keys: SSM SecureString parameters (free standard parameters encrypted with the
# AWS-managed aws/ssm key; a Secrets Manager secret costs $0.40 a month each). CloudFormation
# cannot create a SecureString, so `tether deploy` creates them (with the placeholder, or with
# the value of the secret an older stack kept) and `tether secrets set vast|cloudflare` fills
# them. Outside the user secrets' prefix (/tether/secrets/), which the API functions may read.
VAST_KEY_PARAMETER = "/tether/account/vast"
CLOUDFLARE_PARAMETER = "/tether/account/cloudflare"
# The Secrets Manager secrets of stacks from before the move to SSM parameters (read once, by
# `tether deploy`).
VAST_SECRET_NAME = "tether/vast-api-key"  # noqa: S105 (a name, not a secret)
CLOUDFLARE_SECRET_NAME = "tether/cloudflare"  # noqa: S105 (a name, not a secret)
CLOUDFLARE_SECRET_FIELDS = ("account_id", "api_token", "parent_access_key_id", "bucket")
SECRET_PLACEHOLDER = "REPLACE_ME"  # noqa: S105 (a name, not a secret)

# Where the agent wheel lands in the artifacts bucket: AGENT_WHEEL_PREFIX, re-exported above.

# Routes: (method, path, authorization) — the stack's routes and the tests' expectations.
USER_ROUTES = (
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("GET", "/jobs/{id}"),
    ("POST", "/jobs/{id}/cancel"),
    ("POST", "/code/uploads"),  # presigned PUT of a packed working directory
    ("GET", "/measures"),  # pace and start-up learned per job name (`tether plan`)
)
HEARTBEAT_ROUTE = ("POST", "/agent/heartbeat")
# GET /jobs/{id}/logs has its own function: it alone reads the Cloudflare secret.
LOGS_ROUTE = ("GET", "/jobs/{id}/logs")
FILES_ROUTE = ("GET", "/jobs/{id}/files")  # served by the logs function too
LOGS_FUNCTION_ID = "LogsFunction"
# Stack parameters of the routes' throttles (infra/constructs/api.py; `tether deploy` sets the
# heartbeat route's, docs/deploy.md#throttles).
HEARTBEAT_RATE_PARAMETER = "HeartbeatRateLimit"
HEARTBEAT_BURST_PARAMETER = "HeartbeatBurstLimit"
USER_RATE_PARAMETER = "UserRateLimit"
USER_BURST_PARAMETER = "UserBurstLimit"
# API Gateway's default account-level quota per Region, shared by every API of the account: no
# route's throttle can be higher (a Service Quotas increase raises it).
ACCOUNT_RATE_LIMIT = 10_000
ACCOUNT_BURST_LIMIT = 5_000
LOGS_HANDLER = "functions.api.logs.handler"
OBSERVABILITY_ID = "Observability"

LOG_RETENTION_DAYS = 30
# The monitor runs every minute; a `supervised_at` older than three runs means the supervisor is
# dead (or failing on that job): the heartbeat function renews no lease past it.
MONITOR_INTERVAL_S = 60
SUPERVISED_MAX_AGE_S = 3 * MONITOR_INTERVAL_S
MONITOR_SCHEDULE_EXPRESSION = "rate(1 minute)"
# CDK context (`-c monitorShards=4`, or TETHER_MONITOR_SHARDS for `tether deploy`): how many
# schedules split the fleet by job hash (functions/domain/shards.py). 1: one run sees every job.
MONITOR_SHARDS_CONTEXT = "monitorShards"
# CDK context: each function's reserved concurrency (infra/concurrency.py, docs/deploy.md), or
# the environment variable next to it for `make synth` and `tether deploy`.
MONITOR_CONCURRENCY_CONTEXT = "monitorConcurrency"
LIFECYCLE_CONCURRENCY_CONTEXT = "lifecycleConcurrency"
HEARTBEAT_CONCURRENCY_CONTEXT = "heartbeatConcurrency"
JOBS_CONCURRENCY_CONTEXT = "jobsConcurrency"
# CDK context (`-c dashboard=false`, or TETHER_DASHBOARD=false for `tether deploy
# --no-dashboard`): leave the CloudWatch dashboard out ($3 a month beyond an account's 3 free
# ones; the alarms stay). The stack output says which a plain redeploy keeps.
DASHBOARD_CONTEXT = "dashboard"
DASHBOARD_ENV = "TETHER_DASHBOARD"
OUTPUT_DASHBOARD = "Dashboard"  # "on" or "off"


def dashboard_wanted(value: object) -> bool:
    """The `dashboard` context (default on): true/on/1 or false/off/0; anything else fails the
    synth, naming it."""
    if value is None or isinstance(value, bool):
        return value is not False
    text = str(value).strip().lower()
    if text in ("true", "on", "1", "yes"):
        return True
    if text in ("false", "off", "0", "no"):
        return False
    raise ValueError(
        f"context {DASHBOARD_CONTEXT}={value!r}: give true or false "
        f"(e.g. -c {DASHBOARD_CONTEXT}=false)"
    )


# Synth-time settings read from the environment: variable → CDK context.
MONITOR_CONCURRENCY_ENV = "TETHER_MONITOR_CONCURRENCY"
LIFECYCLE_CONCURRENCY_ENV = "TETHER_LIFECYCLE_CONCURRENCY"
HEARTBEAT_CONCURRENCY_ENV = "TETHER_HEARTBEAT_CONCURRENCY"
JOBS_CONCURRENCY_ENV = "TETHER_JOBS_CONCURRENCY"
SYNTH_CONTEXT_ENV = {
    MONITOR_SHARDS_ENV: MONITOR_SHARDS_CONTEXT,
    DASHBOARD_ENV: DASHBOARD_CONTEXT,
    MONITOR_CONCURRENCY_ENV: MONITOR_CONCURRENCY_CONTEXT,
    LIFECYCLE_CONCURRENCY_ENV: LIFECYCLE_CONCURRENCY_CONTEXT,
    HEARTBEAT_CONCURRENCY_ENV: HEARTBEAT_CONCURRENCY_CONTEXT,
    JOBS_CONCURRENCY_ENV: JOBS_CONCURRENCY_CONTEXT,
}
# The lifecycle's longest path: an hour of waiting for capacity plus retried destroys.
LIFECYCLE_TIMEOUT_HOURS = 3

__all__ = [
    "AGENT_WHEEL_PREFIX",
    "API_URL_ENV",
    "ARTIFACTS_BUCKET_ENV",
    "CLOUDFLARE_SECRET_ARN_ENV",
    "IDEMPOTENCY_TTL_ENV",
    "JOB_EVENTS_TOPIC_ARN_ENV",
    "MAX_BODY_BYTES_ENV",
    "METRICS_NAMESPACE_ENV",
    "MONITOR_INTERVAL_ENV",
    "MONITOR_SHARDS_ENV",
    "SERVICE_NAME_ENV",
    "STATE_MACHINE_ARN_ENV",
    "SUPERVISED_MAX_AGE_ENV",
    "TABLE_NAME_ENV",
    "VAST_SECRET_ARN_ENV",
]
