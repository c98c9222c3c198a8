"""A heartbeat writes the generation's small heartbeat item (functions/domain/heartbeat_item.py),
the generation item only when a rare part changes; a generation stored before heartbeat items
is read from its generation item until its first heartbeat moves it over; a superseded
generation's heartbeat renews nothing, through either item."""

from __future__ import annotations

from typing import Any

import pytest

from functions.adapters.table import deserialize, generation_key, heartbeat_key, serialize
from functions.domain.agent_token import hash_token
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Heartbeat
from tests.integration.api.helpers import TOKEN, auth, heartbeat_body, replace, running_job

URL = "/agent/heartbeat"

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics")


def beat(api: Any, job_id: str, token: str = TOKEN, **body: Any) -> Any:
    return api.heartbeat("POST", URL, body=heartbeat_body(job_id, **body), headers=auth(token))


def raw(api: Any, key: dict[str, str]) -> dict[str, Any] | None:
    """The item as stored, not merged."""
    reply = api.store.client.get_item(
        TableName=api.store.table_name, Key=serialize(key), ConsistentRead=True
    )
    return deserialize(reply["Item"]) if "Item" in reply else None


def write_as_read(api: Any, job_id: str, heartbeat: Heartbeat, read: Any) -> bool:
    """Generation 1's heartbeat written with its token as if `read` were the generation read
    for it (a write racing a supersede), asking for a long lease."""
    return bool(
        api.store.store_heartbeat(
            job_id,
            1,
            token_hash=hash_token(TOKEN),
            heartbeat=heartbeat,
            lease_expires_at=api.clock.now + 9999,
            previous=read,
        )
    )


def test_a_heartbeat_that_changes_only_hot_parts_writes_the_heartbeat_item_alone(api: Any) -> None:
    job_id = running_job(api, usd_per_hour=0.01, supervised_ago_s=30)
    assert beat(api, job_id, step=120).body["command"] == "continue"
    first_generation_item = raw(api, generation_key(job_id, 1))
    assert first_generation_item is not None
    assert first_generation_item["heartbeat"]["step"] == 120

    api.clock.now += 15
    reply = beat(api, job_id, step=121, bytes_uploaded=99)

    assert reply.body["lease_expires_at"] == api.clock.now + 3 * 3600
    assert raw(api, generation_key(job_id, 1)) == first_generation_item  # not written
    item = raw(api, heartbeat_key(job_id, 1))
    assert item is not None
    assert item["heartbeat"]["step"] == 121 and item["heartbeat"]["at"] == api.clock.now
    assert "last_checkpoint" not in item["heartbeat"]  # rare: on the generation item
    assert item["lease_expires_at"] == api.clock.now + 3 * 3600
    stored = api.store.get_generation(job_id, 1)
    assert stored.heartbeat_item and stored.lease_expires_at == api.clock.now + 3 * 3600
    assert stored.heartbeat.step == 121 and stored.heartbeat.bytes_uploaded == 99
    assert stored.heartbeat.last_checkpoint.step == 100  # merged from the generation item
    assert [g.heartbeat.step for g in api.store.list_generations(job_id)] == [121]
    assert [g.heartbeat.step for g in api.store.get_job_view(job_id).generations] == [121]


def test_a_new_checkpoint_writes_the_generation_item_too(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    beat(api, job_id)
    api.clock.now += 15
    newer = {"step": 200, "generation": 1, "manifest_key": "m2.json"}
    beat(api, job_id, step=210, last_checkpoint=newer)
    stored = raw(api, generation_key(job_id, 1))
    assert stored is not None
    assert stored["heartbeat"]["last_checkpoint"]["step"] == 200
    assert stored["heartbeat"]["step"] == 210
    assert api.store.get_generation(job_id, 1).heartbeat.last_checkpoint.step == 200


def test_a_generation_from_before_heartbeat_items_moves_over_at_its_first_heartbeat(
    api: Any,
) -> None:
    job_id = running_job(api, usd_per_hour=0.01, supervised_ago_s=30)
    old = api.store.get_generation(job_id, 1)
    old_beat = Heartbeat(
        at=api.clock.now - 15,
        agent_time=1.0,
        phase="training",
        step=90,
        gpu=GpuProbe(available=True),
    )
    lease = api.clock.now + 600
    # As an earlier release left it: the heartbeat and the lease on the generation item only.
    api.store.put_generation(
        old.model_copy(update={"heartbeat": old_beat, "lease_expires_at": lease})
    )
    assert raw(api, heartbeat_key(job_id, 1)) is None
    before = api.store.get_generation(job_id, 1)
    assert not before.heartbeat_item
    assert before.heartbeat.step == 90 and before.lease_expires_at == lease

    assert beat(api, job_id, step=121).body["command"] == "continue"

    item = raw(api, heartbeat_key(job_id, 1))
    assert item is not None and item["heartbeat"]["step"] == 121
    assert item["is_current"] is True and item["token_hash"] == hash_token(TOKEN)
    after = api.store.get_generation(job_id, 1)
    assert after.heartbeat_item and after.heartbeat.step == 121
    assert after.lease_expires_at == api.clock.now + 3 * 3600
    api.clock.now += 15
    beat(api, job_id, step=122)
    assert api.store.get_generation(job_id, 1).heartbeat.step == 122


def test_a_superseded_generation_renews_nothing_on_its_heartbeat_item(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    beat(api, job_id)
    read_before = api.store.get_generation(job_id, 1)
    replace(api, job_id, 1)
    item = raw(api, heartbeat_key(job_id, 1))
    assert item is not None and item["is_current"] is False

    reply = beat(api, job_id, step=500)
    assert reply.body["command"] == "superseded" and reply.body["lease_expires_at"] == 0
    assert raw(api, heartbeat_key(job_id, 1)) == item
    # A write that read the generation while it was current fails its condition.
    late = read_before.heartbeat.model_copy(update={"step": 501})
    assert not write_as_read(api, job_id, late, read_before)
    assert raw(api, heartbeat_key(job_id, 1)) == item


def test_a_generation_superseded_before_its_first_heartbeat_never_gets_one(api: Any) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    read_before = api.store.get_generation(job_id, 1)
    replace(api, job_id, 1)
    beat_ = Heartbeat(
        at=api.clock.now, agent_time=1.0, phase="training", gpu=GpuProbe(available=True)
    )
    assert not write_as_read(api, job_id, beat_, read_before)
    stored = api.store.get_generation(job_id, 1)
    assert stored.heartbeat is None and not stored.is_current
    assert stored.lease_expires_at == 0


def test_a_generation_replaced_between_read_and_write_of_its_heartbeat_item(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = running_job(api, supervised_ago_s=30)
    beat(api, job_id)
    real_load = api.store.load_heartbeat_context

    def load_then_replace(job: str, gen: int) -> Any:
        context = real_load(job, gen)
        replace(api, job_id, 1)
        return context

    from functions.api import heartbeat

    monkeypatch.setattr(heartbeat.dependencies().store, "load_heartbeat_context", load_then_replace)
    api.clock.now += 15
    reply = beat(api, job_id, step=130)
    assert reply.body["command"] == "superseded" and reply.body["lease_expires_at"] == 0
    assert api.store.get_generation(job_id, 1).heartbeat.step == 120
