"""`JobRecords`: the job items and their timeline: create (idempotent), read, list, transition,
append an event; with the exceptions and views these return."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.heartbeat_items import merged_generation_items
from functions.adapters.pool import map_bounded
from functions.adapters.store_base import StoreBase
from functions.adapters.table import (
    ACTIVE_INDEX,
    ACTIVE_PARTITION,
    ALL_JOBS_INDEX,
    INDEX_KEYS,
    JOBS_PARTITION,
    TTL_ATTRIBUTE,
    active_partition,
    as_event,
    as_generation,
    as_job,
    decode_page_token,
    deserialize,
    encode_page_token,
    event_item,
    idempotency_key,
    is_condition_failure,
    job_item,
    job_key,
    job_partition,
    serialize,
    slot_partition,
    state_in,
)
from functions.domain.job import (
    ACTIVE_STATES,
    Generation,
    Job,
    JobState,
    StopReason,
    TimelineEvent,
    is_terminal,
)
from functions.domain.labels import SHARD_SLOTS, label_slot


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for job {job_id}")
        self.job_id = job_id


class StateConflict(Exception):
    """A conditional state change did not apply; `job` is the state found (None: no job)."""

    def __init__(self, job: Job | None) -> None:
        super().__init__("job is not in an expected state" if job else "no such job")
        self.job = job


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    next_token: str | None


# The job list's reads per request: Query calls, and the jobs a filtered one reads (DynamoDB
# also ends a page at 1 MB, some 250 job items). Bounded, so that a state rare in a long
# history costs more requests of the client, not a request that runs past its function.
LIST_QUERIES = 4
LIST_READ_ITEMS = 250


def _all_jobs_key(item: dict[str, Any]) -> dict[str, Any]:
    """The AllJobs index key of a job item as a Query returns it: where the next page starts."""
    return {name: item[name] for name in INDEX_KEYS[ALL_JOBS_INDEX]}


@dataclass(frozen=True)
class ActiveJobs:
    jobs: list[Job]
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (pk, why)
    legacy: list[str] = field(default_factory=list)  # job ids still in the `ACTIVE` partition


@dataclass(frozen=True)
class JobView:
    job: Job
    generations: list[Generation] = field(default_factory=list)
    events: list[TimelineEvent] = field(default_factory=list)

    @property
    def current(self) -> Generation | None:
        for gen in self.generations:
            if gen.generation == self.job.current_generation:
                return gen
        return None


class JobRecords(StoreBase):
    """The job items and their timeline events."""

    def create_job(
        self,
        job: Job,
        event: TimelineEvent,
        *,
        idempotency: tuple[str, str] | None = None,
        idempotency_expires_at: float = 0,
    ) -> tuple[Job, bool]:
        """Store a new job and its first event atomically.

        `idempotency=(key, request_hash)`: a second submit with the same key returns the first
        job and `False` (not created) instead of storing another; the same key with another
        request raises IdempotencyConflict.
        """
        items: list[dict[str, Any]] = [
            self._put(job_item(job), condition="attribute_not_exists(pk)"),
            self._put(event_item(event)),
        ]
        if idempotency is not None:
            key, request_hash = idempotency
            record = {
                **idempotency_key(key),
                "job_id": job.job_id,
                "request_hash": request_hash,
                TTL_ATTRIBUTE: int(idempotency_expires_at),
            }
            items.append(self._put(record, condition="attribute_not_exists(pk)"))
        try:
            self._table.transact_write(items)
        except ClientError as exc:
            if idempotency is None or not is_condition_failure(exc):
                raise
            existing = self._table.get(idempotency_key(idempotency[0]))
            if existing is None:  # a collision on the job id itself: vanishingly rare
                raise
            if existing["request_hash"] != idempotency[1]:
                raise IdempotencyConflict(existing["job_id"]) from None
            found = self.get_job(existing["job_id"])
            if found is None:
                raise
            return found, False
        return job, True

    def get_job(self, job_id: str) -> Job | None:
        item = self._table.get(job_key(job_id))
        return as_job(item) if item else None

    def get_job_view(self, job_id: str, *, max_events: int = 100) -> JobView | None:
        """The job, all its generations and its latest `max_events` events, oldest first."""
        pk = job_partition(job_id)
        items = self._table.query_all(
            KeyConditionExpression="pk = :pk AND sk >= :gen",
            ExpressionAttributeValues={":pk": {"S": pk}, ":gen": {"S": "GEN#"}},
        )
        job = None
        for item in items:
            if item["sk"] == "JOB":
                job = as_job(item)
        generations = [as_generation(i) for i in merged_generation_items(items)]
        if job is None:
            return None
        reply = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :evt)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":evt": {"S": "EVT#"}},
            ScanIndexForward=False,
            Limit=max_events,
        )
        events = [as_event(deserialize(i)) for i in reversed(reply.get("Items", []))]
        return JobView(job=job, generations=generations, events=events)

    def list_jobs(
        self, *, state: JobState | None = None, limit: int = 50, token: str | None = None
    ) -> JobPage:
        """Newest first, from the all-jobs index; a state is a FilterExpression. (The ActiveJobs
        index is one partition per label slot, with no order across them: not a list's
        source.) A request makes at most `LIST_QUERIES` Query calls, each reading up to
        `LIST_READ_ITEMS` jobs when filtered, so a state that is rare in a long history gives a
        short page, even an empty one, with a `next_token` to go on from, never a request that
        outlasts its function. Raises `BadPageToken` for a token this store did not hand
        out."""
        start_key = decode_page_token(token, ALL_JOBS_INDEX) if token else None
        jobs: list[Job] = []
        for _ in range(LIST_QUERIES):
            kwargs: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": ALL_JOBS_INDEX,
                "KeyConditionExpression": "list_pk = :p",
                "ExpressionAttributeValues": {":p": {"S": JOBS_PARTITION}},
                "ScanIndexForward": False,
                "Limit": limit - len(jobs) if state is None else LIST_READ_ITEMS,
            }
            if state is not None:
                kwargs["FilterExpression"] = "#state = :state"
                kwargs["ExpressionAttributeNames"] = {"#state": "state"}
                kwargs["ExpressionAttributeValues"][":state"] = {"S": state.value}
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            reply = self.client.query(**kwargs)
            items = reply["Items"]
            taken = items[: limit - len(jobs)]
            jobs.extend(as_job(deserialize(i)) for i in taken)
            # Stopped inside this reply: go on after the last job returned.
            start_key = _all_jobs_key(taken[-1]) if len(taken) < len(items) else None
            start_key = start_key or reply.get("LastEvaluatedKey")
            if not start_key or len(jobs) >= limit:
                break
        return JobPage(jobs=jobs, next_token=encode_page_token(start_key) if start_key else None)

    def list_active_jobs(self) -> list[Job]:
        """Every active job (the monitor's view), oldest first."""
        return self.read_active_jobs().jobs

    def read_active_jobs(self, slots: Iterable[int] | None = None) -> ActiveJobs:
        """Every active job of the label slots `slots` (default: all; a monitor shard's own),
        oldest first, each read on its own: an item that no longer validates (written by
        another version, edited by hand) is named in `unreadable` with why, and hides no
        other job. One Query (paginated) per owned slot's partition, and one of the legacy `ACTIVE`
        partition, whose items of these slots are returned too and named in `legacy` (job
        ids, for `move_to_slot_partitions`). The legacy partition is read first: an item
        moved in between is then read twice (kept once), never missed. A reader of every slot
        (an unsharded monitor) scans the index instead of a Query per slot: the same items
        and read units at scale, but one call and half a read unit when it holds few, as an
        idle run's does."""
        owned = list(range(SHARD_SLOTS)) if slots is None else sorted(set(slots))
        by_pk: dict[str, dict[str, Any]] = {}
        legacy: dict[str, None] = {}  # job ids, in the order read

        def add(item: dict[str, Any]) -> None:
            job_id = str(item.get("pk", "")).removeprefix("JOB#")
            if label_slot(job_id) not in owned:
                return
            if item.get("active_pk") == ACTIVE_PARTITION:
                legacy[job_id] = None
            by_pk[str(item.get("pk"))] = item

        for item in self._active_items(ACTIVE_PARTITION):
            add(item)
        if len(owned) == SHARD_SLOTS:
            for item in self._table.scan_all(IndexName=ACTIVE_INDEX):
                add(item)
        else:
            for slot in owned:
                for item in self._active_items(slot_partition(slot)):
                    add(item)
        jobs: list[Job] = []
        unreadable: list[tuple[str, str]] = []
        for item in sorted(by_pk.values(), key=lambda i: str(i.get("created_key", ""))):
            try:
                jobs.append(as_job(item))
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                unreadable.append((str(item.get("pk", "?")), str(exc)[:300]))
        return ActiveJobs(jobs=jobs, unreadable=unreadable, legacy=list(legacy))

    def _active_items(self, partition: str) -> Sequence[dict[str, Any]]:
        return self._table.query_all(
            IndexName=ACTIVE_INDEX,
            KeyConditionExpression="active_pk = :p",
            ExpressionAttributeValues={":p": {"S": partition}},
        )

    def move_to_slot_partitions(self, job_ids: Sequence[str], *, workers: int = 16) -> int:
        """Move legacy ActiveJobs items (`active_pk = "ACTIVE"`) to their slot's partition,
        `workers` UpdateItems in flight; how many moved. Each only while its item still has
        the legacy value and an active state: a job that ended in between (its `active_pk`
        removed) is not put back into the index."""

        def move(job_id: str) -> bool:
            values: dict[str, Any] = {
                ":legacy": ACTIVE_PARTITION,
                ":slot": active_partition(job_id),
            }
            condition = "active_pk = :legacy AND " + state_in(ACTIVE_STATES, values)
            return self._table.update(
                job_key(job_id),
                UpdateExpression="SET active_pk = :slot",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=serialize(values),
            )

        return sum(map_bounded(move, job_ids, workers=workers))

    def transition_job(
        self,
        job_id: str,
        target: JobState,
        *,
        expected: Iterable[JobState],
        now: float,
        event: TimelineEvent,
        state_reason: str | None = None,
        stop_reason: StopReason | None = None,
        restarts: int | None = None,
    ) -> Job:
        """Move a job to `target` if it is in one of `expected`, with its timeline event, in one
        transaction, setting the reasons and restart count given. Leaving the active states
        removes `active_pk` (the sparse index). `previous_state` keeps the state it left (read
        in the same write, so it is exact even when `expected` allows several). Raises
        StateConflict with the job as found when the condition does not hold."""
        changes = {"state_reason": state_reason, "stop_reason": stop_reason, "restarts": restarts}
        values: dict[str, Any] = {":target": target.value, ":now": now}
        names: dict[str, str] = {"#state": "state"}
        # SET evaluates every operand against the item before the update.
        sets = ["previous_state = #state", "#state = :target", "updated_at = :now"]
        for name, value in changes.items():
            if value is not None:
                names[f"#{name}"] = name
                values[f":{name}"] = value
                sets.append(f"#{name} = :{name}")
        condition = state_in(expected, values)
        expression = "SET " + ", ".join(sets)
        if is_terminal(target):
            expression += " REMOVE active_pk"
        update = {
            "Update": {
                "TableName": self.table_name,
                "Key": serialize(job_key(job_id)),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": serialize(values),
            }
        }
        if not self._table.transact([update, self._put(event_item(event))]):
            raise StateConflict(self.get_job(job_id))
        found = self.get_job(job_id)
        if found is None:  # deleted in between: only by hand
            raise StateConflict(None)
        return found

    def append_event(self, event: TimelineEvent) -> None:
        self._table.put(event_item(event))
