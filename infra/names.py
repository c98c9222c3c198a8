"""Names the stack, the tests, the CLI and the local stack share: construct ids, outputs, env.

Environment variable names are defined next to the settings models that read them
(`functions/settings.py`, which the Lambda asset carries) and re-exported here.
"""

from __future__ import annotations

from functions.settings import (
    IDEMPOTENCY_TTL_ENV,
    MAX_BODY_BYTES_ENV,
    METRICS_NAMESPACE_ENV,
    PULSE_MAX_AGE_ENV,
    SERVICE_NAME_ENV,
    STATE_MACHINE_ARN_ENV,
    TABLE_NAME_ENV,
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

# Lambda handlers (module path inside the asset, which holds only functions/ and its deps).
JOBS_HANDLER = "functions.api.jobs.handler"
HEARTBEAT_HANDLER = "functions.api.heartbeat.handler"

# Stack outputs (logical ids = export-free output names the CLI reads).
OUTPUT_API_URL = "ApiUrl"
OUTPUT_TABLE_NAME = "TableName"
OUTPUT_ARTIFACTS_BUCKET = "ArtifactsBucketName"
OUTPUT_STATE_MACHINE_ARN = "StateMachineArn"
OUTPUT_VAST_SECRET_ARN = "VastSecretArn"  # noqa: S105 (a name, not a secret)
OUTPUT_CLOUDFLARE_SECRET_ARN = "CloudflareSecretArn"  # noqa: S105 (a name, not a secret)

# Secrets Manager secret names (README: how to set them).
VAST_SECRET_NAME = "tether/vast-api-key"  # noqa: S105 (a name, not a secret)
CLOUDFLARE_SECRET_NAME = "tether/cloudflare"  # noqa: S105 (a name, not a secret)
CLOUDFLARE_SECRET_FIELDS = ("account_id", "api_token", "parent_access_key_id", "bucket")
SECRET_PLACEHOLDER = "REPLACE_ME"  # noqa: S105 (a name, not a secret)

# Where the agent wheel lands in the artifacts bucket.
AGENT_WHEEL_PREFIX = "agent/"

# Routes: (method, path, authorization) — the stack's routes and the tests' expectations.
USER_ROUTES = (
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("GET", "/jobs/{id}"),
    ("POST", "/jobs/{id}/cancel"),
)
HEARTBEAT_ROUTE = ("POST", "/agent/heartbeat")

LOG_RETENTION_DAYS = 30
# The monitor runs every minute; a pulse older than three runs means the supervisor is dead.
MONITOR_INTERVAL_S = 60
PULSE_MAX_AGE_S = 3 * MONITOR_INTERVAL_S

__all__ = [
    "IDEMPOTENCY_TTL_ENV",
    "MAX_BODY_BYTES_ENV",
    "METRICS_NAMESPACE_ENV",
    "PULSE_MAX_AGE_ENV",
    "SERVICE_NAME_ENV",
    "STATE_MACHINE_ARN_ENV",
    "TABLE_NAME_ENV",
]
