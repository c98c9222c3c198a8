"""Each function's environment, as the stack fills it (`infra/constructs/`): which variables a
function needs, and the defaults of those it may go without. The models share their fields
(`functions/settings.py`); the variables each function reads stay as listed here."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from functions.settings import (
    HeartbeatSettings,
    JobsApiSettings,
    LifecycleSettings,
    LogsApiSettings,
    MonitorSettings,
)

EVERY_FUNCTION = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "TETHER_TABLE_NAME"}
CLOUDFLARE_API = "https://api.cloudflare.com/client/v4"


def required(model: type[BaseModel]) -> set[str]:
    return {str(f.alias) for f in model.model_fields.values() if f.is_required()}


def defaults(model: type[BaseModel]) -> dict[str, Any]:
    return {str(f.alias): f.default for f in model.model_fields.values() if not f.is_required()}


@pytest.mark.parametrize(
    ("model", "needed", "optional"),
    [
        (
            JobsApiSettings,
            {"TETHER_STATE_MACHINE_ARN"},
            {
                "TETHER_MAX_BODY_BYTES": 256 * 1024,
                "TETHER_IDEMPOTENCY_TTL_S": 86400,
                "TETHER_JOB_EVENTS_TOPIC_ARN": None,
                "TETHER_CLOUDFLARE_SECRET_ARN": None,
                "TETHER_CLOUDFLARE_BASE_URL": CLOUDFLARE_API,
                "TETHER_R2_ENDPOINT": None,
            },
        ),
        (
            LogsApiSettings,
            {"TETHER_CLOUDFLARE_SECRET_ARN"},
            {"TETHER_CLOUDFLARE_BASE_URL": CLOUDFLARE_API, "TETHER_R2_ENDPOINT": None},
        ),
        (
            MonitorSettings,
            {"TETHER_VAST_SECRET_ARN", "TETHER_CLOUDFLARE_SECRET_ARN", "TETHER_STATE_MACHINE_ARN"},
            {
                "TETHER_VAST_BASE_URL": "https://console.vast.ai",
                "TETHER_CLOUDFLARE_BASE_URL": CLOUDFLARE_API,
                "TETHER_R2_ENDPOINT": None,
                "TETHER_MONITOR_INTERVAL_S": 60,
                "TETHER_VAST_DEADLINE_S": 30,
                "TETHER_VAST_TIMEOUT_S": 20,
                "TETHER_MONITOR_SHARDS": 1,
            },
        ),
        (
            LifecycleSettings,
            {
                "TETHER_VAST_SECRET_ARN",
                "TETHER_CLOUDFLARE_SECRET_ARN",
                "TETHER_ARTIFACTS_BUCKET",
                "TETHER_API_URL",
            },
            {
                "TETHER_VAST_BASE_URL": "https://console.vast.ai",
                "TETHER_CLOUDFLARE_BASE_URL": CLOUDFLARE_API,
                "TETHER_R2_ENDPOINT": None,
                "TETHER_MONITOR_INTERVAL_S": 60,
                "TETHER_VAST_DEADLINE_S": 20,
                "TETHER_VAST_TIMEOUT_S": 10,
                "TETHER_JOB_EVENTS_TOPIC_ARN": None,
            },
        ),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_each_function_reads_its_variables(
    model: type[BaseModel], needed: set[str], optional: dict[str, Any]
) -> None:
    assert required(model) == EVERY_FUNCTION | needed
    assert defaults(model) == optional


def test_the_heartbeat_needs_only_the_table_and_admits_bodies_of_160_kib() -> None:
    assert required(HeartbeatSettings) == EVERY_FUNCTION
    assert defaults(HeartbeatSettings)["TETHER_MAX_BODY_BYTES"] == 160 * 1024
