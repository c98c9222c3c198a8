"""Heartbeat API (docs/architecture.md#heartbeat): token by hash, superseded generations, the lease
and its renewal only while the monitor supervises the job (`supervised_at`)."""

from __future__ import annotations

import pytest

from functions.domain.agent_token import hash_token
from functions.domain.job import Generation, JobState, TimelineEvent
from functions.settings import SUPERVISED_MAX_AGE_ENV
from tests.integration.api.helpers import (
    TOKEN,
    auth,
    credentials,
    heartbeat_body,
    replace,
    running_job,
)

URL = "/agent/heartbeat"

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def beat(api, job_id, token=TOKEN, **body):
    return api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(token))


def test_a_live_supervisor_renews_the_lease_up_to_the_window(api):
    # budget $1 lasts 100 h: the window (3 h) wins
    job_id = running_job(api, usd_per_hour=0.01, supervised_ago_s=30)
    reply = beat(api, job_id)
    assert reply.status == 200
    assert reply.body["command"] == "continue"
    assert reply.body["server_time"] == api.clock.now
    assert reply.body["lease_expires_at"] == api.clock.now + 3 * 3600
    stored = api.store.get_generation(job_id, 1)
    assert stored.lease_expires_at == api.clock.now + 3 * 3600
    assert stored.heartbeat.step == 120 and stored.heartbeat.phase == "training"
    assert stored.heartbeat.at == api.clock.now


def test_the_lease_never_outlasts_the_remaining_budget(api):
    job_id = running_job(api, usd_per_hour=0.5)  # $1 budget, nothing spent: 2 h at $0.5/h
    reply = beat(api, job_id)
    assert reply.body["lease_expires_at"] == pytest.approx(api.clock.now + 2 * 3600)


def test_stale_supervision_keeps_the_old_lease_so_a_dead_monitor_stops_the_host(api):
    old_lease = api.clock.now + 600
    # older than 3 monitor intervals
    job_id = running_job(api, lease_expires_at=old_lease, supervised_ago_s=181)
    reply = beat(api, job_id)
    assert reply.status == 200
    assert reply.body["command"] == "continue"
    assert reply.body["lease_expires_at"] == old_lease
    assert "not renewed" in reply.body["reason"]
    assert api.store.get_generation(job_id, 1).lease_expires_at == old_lease


def test_a_generation_never_supervised_renews_nothing(api):
    lease = api.clock.now + 60
    job_id = running_job(api, lease_expires_at=lease, supervised_ago_s=None)
    assert beat(api, job_id).body["lease_expires_at"] == lease


def test_supervision_of_another_job_renews_nothing_for_this_one(api):
    """Liveness is per job: a monitor that supervises one job but fails on another (an item it
    cannot read, a failing write) renews only the first one's lease."""
    lease = api.clock.now + 60
    watched = running_job(api, usd_per_hour=0.01, token="watched-token")
    failing = running_job(api, lease_expires_at=lease, supervised_ago_s=None)
    assert beat(api, failing).body["lease_expires_at"] == lease
    renewed = beat(api, watched, token="watched-token").body["lease_expires_at"]
    assert renewed == api.clock.now + 3 * 3600


def test_supervision_freshness_is_configurable(api, monkeypatch):
    from functions.api import heartbeat

    monkeypatch.setenv(SUPERVISED_MAX_AGE_ENV, "1000")
    heartbeat.dependencies.cache_clear()  # a new environment: a new container
    job_id = running_job(
        api, usd_per_hour=0.01, lease_expires_at=api.clock.now + 5, supervised_ago_s=900
    )
    assert beat(api, job_id).body["lease_expires_at"] == api.clock.now + 3 * 3600


def test_an_old_generations_token_is_superseded_with_no_lease(api):
    job_id = running_job(api, generation=1)
    # The lifecycle replaces generation 1 by generation 2.
    replace(api, job_id, 1)
    assert api.store.record_generation(
        Generation(job_id=job_id, generation=2, token_hash=hash_token("new-token"), usd_per_hour=1),
        expected=[JobState.REPLACING],
        now=api.clock.now,
        event=TimelineEvent(job_id=job_id, at=api.clock.now, kind="rented", message="g2"),
    )
    before = api.store.get_generation(job_id, 1)
    reply = beat(api, job_id)
    assert reply.status == 200
    assert reply.body["command"] == "superseded"
    assert reply.body["lease_expires_at"] == 0
    assert reply.body["credentials"] is None
    assert api.store.get_generation(job_id, 1) == before  # nothing stored for it
    assert beat(api, job_id, token="new-token", generation=2).body["command"] == "continue"


def test_a_generation_replaced_between_read_and_write_is_superseded(api, monkeypatch):
    job_id = running_job(api)
    real_load = api.store.load_heartbeat_context

    def load_then_replace(job, gen):
        context = real_load(job, gen)
        old = api.store.get_generation(job_id, 1)
        api.store.put_generation(old.model_copy(update={"is_current": False}))
        return context

    from functions.api import heartbeat

    monkeypatch.setattr(heartbeat.dependencies().store, "load_heartbeat_context", load_then_replace)
    reply = beat(api, job_id)
    assert reply.body["command"] == "superseded"
    assert reply.body["lease_expires_at"] == 0


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing Authorization header"),
        ({"Authorization": "Basic abc"}, "must be 'Bearer <agent token>'"),
        ({"Authorization": "Bearer"}, "must be 'Bearer <agent token>'"),
        ({"Authorization": "Bearer " + "x" * 300}, "token too long"),
        ({"Authorization": "Bearer wrong-token"}, "not the token of this job generation"),
    ],
)
def test_bad_tokens_are_401_and_store_nothing(api, headers, reason):
    job_id = running_job(api)
    before = api.items()
    reply = api.heartbeat("POST", URL, body=heartbeat_body(job_id), headers=headers)
    assert reply.status == 401
    assert reply.body["error"] == "unauthorized"
    assert reply.body["details"] == [{"path": "header.authorization", "reason": reason}]
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert api.items() == before


def test_a_valid_token_for_another_job_or_generation_is_401(api):
    job_id = running_job(api)
    other = running_job(api, token="other-token")
    assert beat(api, other).status == 401  # TOKEN belongs to job_id, not other
    assert beat(api, job_id, generation=7).status == 401


def test_stop_when_the_job_is_cancelled(api):
    job_id = running_job(api)
    api.jobs("POST", f"/jobs/{job_id}/cancel")
    reply = beat(api, job_id)
    assert reply.body["command"] == "stop"
    assert "cancelled" in reply.body["reason"]


def test_newer_credentials_ride_the_reply_and_the_same_ones_do_not(api):
    expiry = api.clock.now + 900
    job_id = running_job(api, creds=credentials(expires_at=expiry))
    fresh = beat(api, job_id, credentials_expire_at=expiry - 800)
    assert fresh.body["credentials"]["read"]["access_key_id"] == "AKIDNEW"
    assert fresh.body["credentials"]["write"]["expires_at"] == expiry
    same = beat(api, job_id, credentials_expire_at=expiry)
    assert same.body["credentials"] is None
    first = beat(api, job_id)  # an agent that holds none yet
    assert first.body["credentials"]["write"]["session_token"] == "session"


def test_a_busy_gpu_moves_gpu_busy_at_and_an_idle_one_keeps_it(api):
    """The hung rule judges GPU idleness over its whole window: the heartbeat keeps the last
    time the GPU was above the job's idle threshold (5 % by default)."""
    job_id = running_job(api)
    busy_at = api.clock.now
    beat(api, job_id, gpu={"available": True, "responsive": True, "utilization_pct": 5.5})
    api.clock.now += 15
    beat(api, job_id, gpu={"available": True, "responsive": True, "utilization_pct": 5.0})
    api.clock.now += 15
    beat(api, job_id, gpu={"available": False, "responsive": True})
    stored = api.store.get_generation(job_id, 1)
    assert stored.gpu_busy_at == busy_at
    assert stored.heartbeat.at == busy_at + 30
