"""Heartbeats are stored in the order API Gateway received them: an older heartbeat whose
invocation ends after a newer one's (a cold start, the agent timing out and sending the next)
is not written over it, through either item, and is not answered `superseded`, which would
stop a healthy host. A replaced generation's heartbeat still is."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.api import heartbeat
from functions.domain.storage_layout import outputs_manifest_key
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, replace, running_job
from tether_local.aws.apigw import LocalLambdaContext, http_api_event

URL = "/agent/heartbeat"
RECEIVED_MS = 1_800_000_000_000  # API Gateway's clock (milliseconds)

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def beat_received(api: Any, job_id: str, received_ms: int | None, **body: Any) -> dict[str, Any]:
    """A heartbeat as API Gateway passes it on, received at `received_ms` (None: no request
    time, as a direct invocation); the reply's status and body."""
    event = http_api_event("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(TOKEN))
    if received_ms is None:
        del event["requestContext"]["timeEpoch"]
    else:
        event["requestContext"]["timeEpoch"] = received_ms
    result = heartbeat.handler(event, LocalLambdaContext())
    return {"status": result["statusCode"], **json.loads(result["body"])}


def finished_body(job_id: str) -> dict[str, Any]:
    """What an agent reports once the job is done: the final checkpoint and the outputs."""
    return {
        "phase": "finished",
        "step": 600,
        "exit_code": 0,
        "last_checkpoint": {"step": 600, "generation": 1, "manifest_key": "m600.json"},
        "outputs": {
            "generation": 1,
            "manifest_key": outputs_manifest_key(job_id, 1),
            "manifest_sha256": "a" * 64,
            "files": 1,
            "bytes": 76_800,
        },
    }


def test_an_older_heartbeat_ending_last_changes_nothing(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    newer = beat_received(api, job_id, RECEIVED_MS + 2_000, **finished_body(job_id))
    assert newer["status"] == 200 and newer["command"] == "continue"
    stored_before = api.store.get_generation(job_id, 1)
    assert stored_before.heartbeat.outputs is not None

    api.clock.now += 1  # its invocation ends later, though API Gateway received it first
    older = beat_received(api, job_id, RECEIVED_MS, phase="training", step=550)

    assert older["status"] == 200
    assert older["command"] == "continue"  # not `superseded`: the host is healthy
    assert older.get("credentials") is None and older.get("job") is None
    stored = api.store.get_generation(job_id, 1)
    assert stored.heartbeat == stored_before.heartbeat  # the hot parts and the rare ones
    assert stored.heartbeat.phase == "finished" and stored.heartbeat.step == 600
    assert stored.heartbeat.last_checkpoint.step == 600
    assert stored.lease_expires_at == stored_before.lease_expires_at


def test_heartbeats_in_order_are_each_stored(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    for n, step in enumerate((120, 121, 121)):  # the same millisecond twice: stored too
        ms = RECEIVED_MS + min(n, 1) * 15_000
        api.clock.now += 15
        assert beat_received(api, job_id, ms, step=step)["command"] == "continue"
        stored = api.store.get_generation(job_id, 1)
        assert stored.heartbeat.step == step and stored.heartbeat.received_at == ms / 1000
        assert stored.heartbeat.at == api.clock.now


def test_a_heartbeat_with_no_request_time_is_stored_unordered(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    beat_received(api, job_id, RECEIVED_MS, step=130)
    api.clock.now += 15
    assert beat_received(api, job_id, None, step=125)["command"] == "continue"
    stored = api.store.get_generation(job_id, 1)
    assert stored.heartbeat.step == 125 and stored.heartbeat.received_at is None


def test_a_replaced_generations_late_heartbeat_is_still_superseded(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    beat_received(api, job_id, RECEIVED_MS + 2_000, step=130)
    replace(api, job_id, 1)
    api.clock.now += 1
    late = beat_received(api, job_id, RECEIVED_MS, step=120)
    assert late["command"] == "superseded" and late["lease_expires_at"] == 0


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        ({"timeEpoch": 1_800_000_000_123}, 1_800_000_000.123),
        ({}, None),
        ({"timeEpoch": "1800000000123"}, None),
        ({"timeEpoch": True}, None),
        ({"timeEpoch": 0}, None),
    ],
)
def test_the_request_time_is_read_from_api_gateways_context(
    context: dict[str, Any], expected: float | None
) -> None:
    assert heartbeat.received_at({"requestContext": context}) == expected
    assert heartbeat.received_at({}) is None
