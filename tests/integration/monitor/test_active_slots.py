"""The ActiveJobs index partitioned by label slot (docs/architecture.md#table-layout): a job's
item sits in `ACTIVE#<hex slot>`, a monitor shard reads only its own slots' partitions, and items
written before the slots (`ACTIVE`) are still read by every run and moved to their slot's
partition by their own shard, a bounded number a run, never putting back a job that ended."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from functions.adapters.table import (
    ACTIVE_PARTITION,
    active_partition,
    deserialize,
    job_key,
    serialize,
    slot_partition,
)
from functions.domain.job import JobState
from functions.domain.labels import SHARD_SLOTS, label_slot
from functions.domain.shards import Shard
from functions.monitor import service
from tests.integration.monitor.test_monitor_at_scale import World, world

JOBS = 40
SHARDS = 4
TABLE_JOBS = [f"bench-{i:05d}" for i in range(JOBS)]
SCANNED = "(Scan of the ActiveJobs index)"


@pytest.fixture
def fleet() -> Iterator[World]:
    yield from world(JOBS)


def raw_job(w: World, job_id: str) -> dict[str, Any]:
    reply = w.store.client.get_item(
        TableName=w.store.table_name, Key=serialize(job_key(job_id)), ConsistentRead=True
    )
    return deserialize(reply["Item"])


def make_legacy(w: World, job_ids: list[str]) -> None:
    """As a deployment from before the slots wrote them: one `ACTIVE` partition."""
    for job_id in job_ids:
        w.store.client.update_item(
            TableName=w.store.table_name,
            Key=serialize(job_key(job_id)),
            UpdateExpression="SET active_pk = :legacy",
            ExpressionAttributeValues=serialize({":legacy": ACTIVE_PARTITION}),
        )


def finish_by_hand(w: World, job_id: str) -> None:
    """What a terminal transition writes to the job item: the state, `active_pk` removed."""
    w.store.client.update_item(
        TableName=w.store.table_name,
        Key=serialize(job_key(job_id)),
        UpdateExpression="SET #state = :done REMOVE active_pk",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues=serialize({":done": "succeeded"}),
    )


def queried_partitions(w: World) -> list[str]:
    """Record the ActiveJobs partition of every Query the store makes from now on, and
    `SCANNED` for each page of a Scan of that index."""
    seen: list[str] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        if params.get("IndexName") == "ActiveJobs":
            seen.append(params["ExpressionAttributeValues"][":p"]["S"])

    def record_scan(params: dict[str, Any], **_: Any) -> None:
        assert params.get("IndexName") == "ActiveJobs"  # never the table
        seen.append(SCANNED)

    w.store.client.meta.events.register("provide-client-params.dynamodb.Query", record)
    w.store.client.meta.events.register("provide-client-params.dynamodb.Scan", record_scan)
    return seen


def owned(shard: Shard) -> list[str]:
    return [j for j in TABLE_JOBS if shard.owns_job(j)]


def test_a_job_item_sits_in_its_label_slots_partition(fleet: World) -> None:
    for job_id in TABLE_JOBS:
        expected = f"ACTIVE#{label_slot(job_id):x}"
        assert active_partition(job_id) == expected
        assert raw_job(fleet, job_id)["active_pk"] == expected
    assert {slot_partition(s) for s in range(SHARD_SLOTS)} == {
        f"ACTIVE#{d}" for d in "0123456789abcdef"
    }


def test_each_shard_reads_only_its_own_slots_and_the_legacy_partition(fleet: World) -> None:
    seen = queried_partitions(fleet)
    shard = Shard(1, SHARDS)

    report = fleet.run(shard)

    assert sorted(seen) == sorted(
        [ACTIVE_PARTITION, *(slot_partition(s) for s in shard.slots)]
    )  # one Query a slot (one page each here), and the legacy partition
    assert report.jobs == report.supervised == len(owned(shard))
    assert report.active_items_moved == 0


def test_the_whole_monitor_reads_every_slot_in_one_scan_of_the_index(fleet: World) -> None:
    """An unsharded run: the legacy partition, then one Scan of the index (one page here)
    instead of a Query per slot: an idle run is two calls, not seventeen."""
    seen = queried_partitions(fleet)

    report = fleet.run()

    assert seen == [ACTIVE_PARTITION, SCANNED]
    assert report.jobs == report.supervised == JOBS


def test_the_scan_pages_through_the_index(fleet: World, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = queried_partitions(fleet)
    real_scan = fleet.store.client.scan

    def scan_in_small_pages(**kwargs: Any) -> Any:
        return real_scan(**{**kwargs, "Limit": 7})

    monkeypatch.setattr(fleet.store.client, "scan", scan_in_small_pages)
    jobs = fleet.store.read_active_jobs().jobs

    assert sorted(j.job_id for j in jobs) == TABLE_JOBS
    assert seen.count(SCANNED) == JOBS // 7 + 1


def test_a_legacy_item_found_by_the_scan_alone_is_still_moved(fleet: World) -> None:
    """A legacy item the Query of `ACTIVE` did not return (written there by an older version
    after that Query) is named for the move all the same."""
    make_legacy(fleet, ["bench-00003"])
    store = fleet.store
    real = store._active_items

    def legacy_read_before_the_write(partition: str) -> Any:
        return [] if partition == ACTIVE_PARTITION else real(partition)

    store._active_items = legacy_read_before_the_write  # type: ignore[method-assign]
    read = store.read_active_jobs()

    assert read.legacy == ["bench-00003"]
    assert sorted(j.job_id for j in read.jobs) == TABLE_JOBS


def test_legacy_items_are_read_and_judged_and_moved_to_their_slot(fleet: World) -> None:
    legacy = TABLE_JOBS[::3]
    make_legacy(fleet, legacy)

    report = fleet.run()

    assert report.jobs == report.supervised == JOBS  # none missed
    assert report.active_items_moved == len(legacy)
    for job_id in TABLE_JOBS:
        assert raw_job(fleet, job_id)["active_pk"] == active_partition(job_id)
    fleet.clock.now += 60
    again = fleet.run()
    assert again.active_items_moved == 0 and again.supervised == JOBS


def test_moves_are_bounded_per_run_and_the_rest_still_read(
    fleet: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "LEGACY_MOVES", 4)
    make_legacy(fleet, TABLE_JOBS[:10])

    moved = []
    for _ in range(3):
        report = fleet.run()
        assert report.jobs == report.supervised == JOBS
        moved.append(report.active_items_moved)
        fleet.clock.now += 60

    assert moved == [4, 4, 2]
    assert all(raw_job(fleet, j)["active_pk"] == active_partition(j) for j in TABLE_JOBS)


def test_a_shard_judges_and_moves_only_its_own_legacy_items(fleet: World) -> None:
    make_legacy(fleet, TABLE_JOBS)
    shard = Shard(2, SHARDS)

    report = fleet.run(shard)

    mine = owned(shard)
    assert report.jobs == report.supervised == len(mine)
    assert report.active_items_moved == len(mine)
    for job_id in TABLE_JOBS:
        expected = active_partition(job_id) if job_id in mine else ACTIVE_PARTITION
        assert raw_job(fleet, job_id)["active_pk"] == expected


def test_a_job_that_ends_before_its_move_is_not_put_back(fleet: World) -> None:
    make_legacy(fleet, TABLE_JOBS[:3])
    read = fleet.store.read_active_jobs()
    assert sorted(read.legacy) == TABLE_JOBS[:3]
    finish_by_hand(fleet, "bench-00001")  # between the read and the move

    moved = fleet.store.move_to_slot_partitions(read.legacy)

    assert moved == 2
    assert "active_pk" not in raw_job(fleet, "bench-00001")
    assert "bench-00001" not in {j.job_id for j in fleet.store.read_active_jobs().jobs}


def test_an_item_moved_while_the_partitions_are_read_is_read_once(fleet: World) -> None:
    """The legacy partition is read first: a move that lands between the reads shows the item
    twice (kept once), never not at all; the jobs come oldest first across partitions."""
    make_legacy(fleet, ["bench-00007"])
    store = fleet.store
    real = store._active_items

    def moving_after_legacy(partition: str) -> Any:
        items = real(partition)
        if partition == ACTIVE_PARTITION:
            assert store.move_to_slot_partitions(["bench-00007"]) == 1
        return items

    store._active_items = moving_after_legacy  # type: ignore[method-assign]
    jobs = store.read_active_jobs().jobs

    ids = [j.job_id for j in jobs]
    assert sorted(ids) == TABLE_JOBS  # each once
    assert [(j.created_at, j.job_id) for j in jobs] == sorted(
        (j.created_at, j.job_id) for j in jobs
    )


def test_the_job_list_by_active_state_pages_every_slot_newest_first(fleet: World) -> None:
    """The job list reads the all-jobs index (ActiveJobs has no order across its partitions):
    a state filter still pages through every slot's jobs, newest first, each once."""
    finish_by_hand(fleet, "bench-00005")
    first = fleet.store.list_jobs(state=JobState.RUNNING, limit=15)
    assert first.next_token is not None
    rest = fleet.store.list_jobs(state=JobState.RUNNING, limit=100, token=first.next_token)

    listed = [j.job_id for j in first.jobs + rest.jobs]
    assert listed == sorted(set(TABLE_JOBS) - {"bench-00005"}, reverse=True)
