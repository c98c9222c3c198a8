"""DynamoDB data access: one table, on demand, point-in-time recovery (the single-table layout).

- job — `pk=JOB#<id> sk=JOB`: the `Job` record (spec as a map, state, budget, spend, current
  generation); `list_pk="JOB"` and `created_key` for the all-jobs index; `active_pk="ACTIVE"`
  only while the job is active.
- generation (one host attempt) — `pk=JOB#<id> sk=GEN#<nnnn>`: instance id, offer id, machine
  id, $/h, prices, agent token sha256 (`token_hash`), status, `is_current`, `lease_expires_at`,
  `heartbeat` (at, agent time, phase, step, GPU probe, last/restored checkpoint, exit code,
  bytes down/up), `credentials` (R2 key, secret, session token, expiry, endpoint, bucket,
  prefix).
- timeline event — `pk=JOB#<id> sk=EVT#<iso time>#<nnn>#<event id>`: kind, message, data.
- idempotency key — `pk=IDEM#<key> sk=IDEM`: job id, request hash, `expires_at_ttl` (DynamoDB
  TTL removes it after a day).
- host reputation — `pk=HOST#<machine_id> sk=REP`: `failures` (a string set of `<job>:g<n>`, so
  a repeated write counts once), `dead_failures`, `hung_failures`, `last_failure_at`,
  `avoid_until` (written by the monitor, read by the lifecycle's planner as the blocklist).
- supervisor pulse — `pk=SUPERVISOR sk=PULSE`: `at` (epoch s), written by the monitor on every
  run; the heartbeat renews leases only while it is fresh.

Indexes (both project all attributes):
- `ActiveJobs` — partition `active_pk`, sort `created_key` (`<iso created>#<id>`). Sparse: the
  attribute is removed when a job becomes terminal, so the monitor reads only live jobs.
- `AllJobs` — partition `list_pk`, sort `created_key`: `GET /jobs` newest first without a scan.

`TABLE_DEFINITION` below is the one definition of keys and indexes; the CDK construct
(`infra/constructs/data.py`), the tests and the local stack all create the table from it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from functions.domain.job import (
    ACTIVE_STATES,
    Generation,
    Heartbeat,
    HostReputation,
    Job,
    JobState,
    TimelineEvent,
    is_terminal,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

ACTIVE_INDEX = "ActiveJobs"
ALL_JOBS_INDEX = "AllJobs"
ACTIVE_PARTITION = "ACTIVE"
JOBS_PARTITION = "JOB"
TTL_ATTRIBUTE = "expires_at_ttl"

TABLE_DEFINITION: dict[str, Any] = {
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        {"AttributeName": "active_pk", "AttributeType": "S"},
        {"AttributeName": "list_pk", "AttributeType": "S"},
        {"AttributeName": "created_key", "AttributeType": "S"},
    ],
    "GlobalSecondaryIndexes": [
        {
            "IndexName": ACTIVE_INDEX,
            "KeySchema": [
                {"AttributeName": "active_pk", "KeyType": "HASH"},
                {"AttributeName": "created_key", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        },
        {
            "IndexName": ALL_JOBS_INDEX,
            "KeySchema": [
                {"AttributeName": "list_pk", "KeyType": "HASH"},
                {"AttributeName": "created_key", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        },
    ],
    "BillingMode": "PAY_PER_REQUEST",
}

_INDEX_KEYS = {
    ACTIVE_INDEX: frozenset({"pk", "sk", "active_pk", "created_key"}),
    ALL_JOBS_INDEX: frozenset({"pk", "sk", "list_pk", "created_key"}),
}


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table from TABLE_DEFINITION (tests, local stack) and switch its TTL on."""
    client.create_table(TableName=table_name, **TABLE_DEFINITION)
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )


# --- keys ---------------------------------------------------------------------------------


def job_key(job_id: str) -> dict[str, str]:
    return {"pk": f"JOB#{job_id}", "sk": "JOB"}


def generation_key(job_id: str, generation: int) -> dict[str, str]:
    return {"pk": f"JOB#{job_id}", "sk": f"GEN#{generation:04d}"}


def event_key(event: TimelineEvent) -> dict[str, str]:
    return {
        "pk": f"JOB#{event.job_id}",
        "sk": f"EVT#{iso(event.at)}#{event.seq:03d}#{event.event_id}",
    }


def idempotency_key(key: str) -> dict[str, str]:
    return {"pk": f"IDEM#{key}", "sk": "IDEM"}


def host_key(machine_id: int) -> dict[str, str]:
    return {"pk": f"HOST#{machine_id}", "sk": "REP"}


PULSE_KEY = {"pk": "SUPERVISOR", "sk": "PULSE"}


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="microseconds")


# --- (de)serialisation --------------------------------------------------------------------

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo_value(value: Any) -> Any:
    # DynamoDB numbers are Decimals; str() keeps 0.95 as 0.95 instead of binary noise.
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_dynamo_value(v) for v in value]
    return value


def _from_dynamo_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {k: _from_dynamo_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo_value(v) for v in value]
    return value


def serialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(_to_dynamo_value(v)) for k, v in item.items()}


def deserialize(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _from_dynamo_value(_deserializer.deserialize(v)) for k, v in item.items()}


def _job_item(job: Job) -> dict[str, Any]:
    item: dict[str, Any] = {
        **job_key(job.job_id),
        **job.model_dump(mode="json"),
        "list_pk": JOBS_PARTITION,
        "created_key": f"{iso(job.created_at)}#{job.job_id}",
    }
    if job.active:
        item["active_pk"] = ACTIVE_PARTITION
    return item


def _strip_keys(item: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in item.items()
        if k not in {"pk", "sk", "active_pk", "list_pk", "created_key", TTL_ATTRIBUTE}
    }


# --- errors -------------------------------------------------------------------------------


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"idempotency key already used for job {job_id}")
        self.job_id = job_id


class BadPageToken(ValueError):
    """A `next` token that this store did not hand out."""


class StateConflict(Exception):
    """A conditional state change did not apply; `job` is the state found (None: no job)."""

    def __init__(self, job: Job | None) -> None:
        super().__init__("job is not in an expected state" if job else "no such job")
        self.job = job


def _set_clause(updates: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """`SET #u0 = :u0, …` with its names and (plain) values."""
    names = {f"#u{i}": name for i, name in enumerate(updates)}
    values = {f":u{i}": value for i, value in enumerate(updates.values())}
    clause = ", ".join(f"#u{i} = :u{i}" for i in range(len(updates)))
    return f"SET {clause}", names, values


def _is_condition_failure(exc: ClientError) -> bool:
    code = exc.response.get("Error", {}).get("Code", "")
    return code in {"ConditionalCheckFailedException", "TransactionCanceledException"}


# --- views --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobPage:
    jobs: list[Job]
    next_token: str | None


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


def encode_page_token(last_key: Mapping[str, Any]) -> str:
    plain = deserialize(last_key)
    return base64.urlsafe_b64encode(json.dumps(plain, sort_keys=True).encode()).decode()


def decode_page_token(token: str, index: str) -> dict[str, Any]:
    try:
        plain = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise BadPageToken("is not a token returned by this API") from exc
    if (
        not isinstance(plain, dict)
        or set(plain) != _INDEX_KEYS[index]
        or not all(isinstance(v, str) and 0 < len(v) <= 256 for v in plain.values())
    ):
        raise BadPageToken("is not a token returned by this API for this filter")
    return serialize(plain)


# --- the store ----------------------------------------------------------------------------


class JobStore:
    """Every read and write of the tether table. `client=None` builds a default client."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table_name = table_name
        self.client: DynamoDBClient = client or boto3.client("dynamodb")

    # jobs ----------------------------------------------------------------------------------

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
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": serialize(_job_item(job)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {"Put": {"TableName": self.table_name, "Item": serialize(self._event_item(event))}},
        ]
        if idempotency is not None:
            key, request_hash = idempotency
            items.append(
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": serialize(
                            {
                                **idempotency_key(key),
                                "job_id": job.job_id,
                                "request_hash": request_hash,
                                TTL_ATTRIBUTE: int(idempotency_expires_at),
                            }
                        ),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        try:
            self.client.transact_write_items(TransactItems=cast(Any, items))
        except ClientError as exc:
            if idempotency is None or not _is_condition_failure(exc):
                raise
            existing = self._get(idempotency_key(idempotency[0]))
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
        item = self._get(job_key(job_id))
        return Job.model_validate(_strip_keys(item)) if item else None

    def get_job_view(self, job_id: str, *, max_events: int = 100) -> JobView | None:
        """The job, all its generations and its latest `max_events` events, oldest first."""
        pk = f"JOB#{job_id}"
        items = self._query_all(
            KeyConditionExpression="pk = :pk AND sk >= :gen",
            ExpressionAttributeValues={":pk": {"S": pk}, ":gen": {"S": "GEN#"}},
        )
        job = None
        generations = []
        for item in items:
            if item["sk"] == "JOB":
                job = Job.model_validate(_strip_keys(item))
            elif item["sk"].startswith("GEN#"):
                generations.append(Generation.model_validate(_strip_keys(item)))
        if job is None:
            return None
        reply = self.client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :evt)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":evt": {"S": "EVT#"}},
            ScanIndexForward=False,
            Limit=max_events,
        )
        events = [
            TimelineEvent.model_validate(_strip_keys(deserialize(i)))
            for i in reversed(reply.get("Items", []))
        ]
        return JobView(job=job, generations=generations, events=events)

    def list_jobs(
        self, *, state: JobState | None = None, limit: int = 50, token: str | None = None
    ) -> JobPage:
        """Newest first. An active state (or none) reads the all-jobs index; a state filter
        is a FilterExpression, so a page is filled by reading on until `limit` jobs match."""
        index = ACTIVE_INDEX if state in ACTIVE_STATES else ALL_JOBS_INDEX
        partition_attr, partition = (
            ("active_pk", ACTIVE_PARTITION)
            if index == ACTIVE_INDEX
            else ("list_pk", JOBS_PARTITION)
        )
        start_key = decode_page_token(token, index) if token else None
        jobs: list[Job] = []
        while True:
            kwargs: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": index,
                "KeyConditionExpression": "#p = :p",
                "ExpressionAttributeNames": {"#p": partition_attr},
                "ExpressionAttributeValues": {":p": {"S": partition}},
                "ScanIndexForward": False,
                "Limit": limit - len(jobs),
            }
            if state is not None:
                kwargs["FilterExpression"] = "#state = :state"
                kwargs["ExpressionAttributeNames"]["#state"] = "state"
                kwargs["ExpressionAttributeValues"][":state"] = {"S": state.value}
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            reply = self.client.query(**kwargs)
            jobs.extend(Job.model_validate(_strip_keys(deserialize(i))) for i in reply["Items"])
            start_key = reply.get("LastEvaluatedKey")
            if not start_key or len(jobs) >= limit:
                break
        return JobPage(jobs=jobs, next_token=encode_page_token(start_key) if start_key else None)

    def list_active_jobs(self) -> list[Job]:
        """Every active job (the monitor's view), oldest first."""
        items = self._query_all(
            IndexName=ACTIVE_INDEX,
            KeyConditionExpression="active_pk = :p",
            ExpressionAttributeValues={":p": {"S": ACTIVE_PARTITION}},
        )
        return [Job.model_validate(_strip_keys(i)) for i in items]

    def transition_job(
        self,
        job_id: str,
        target: JobState,
        *,
        expected: Iterable[JobState],
        now: float,
        event: TimelineEvent,
        updates: Mapping[str, Any] | None = None,
    ) -> Job:
        """Move a job to `target` if it is in one of `expected`, with its timeline event, in one
        transaction. Leaving the active states removes `active_pk` (the sparse index).
        `previous_state` keeps the state it left (read in the same write, so it is exact even
        when `expected` allows several). Raises StateConflict with the job as found when the
        condition does not hold."""
        expected = list(expected)
        values: dict[str, Any] = {":target": target.value, ":now": now}
        names: dict[str, str] = {"#state": "state"}
        # SET evaluates every operand against the item before the update.
        sets = ["previous_state = #state", "#state = :target", "updated_at = :now"]
        for i, (name, value) in enumerate((updates or {}).items()):
            names[f"#u{i}"] = name
            values[f":u{i}"] = value
            sets.append(f"#u{i} = :u{i}")
        placeholders = []
        for i, state in enumerate(expected):
            values[f":e{i}"] = state.value
            placeholders.append(f":e{i}")
        expression = "SET " + ", ".join(sets)
        if is_terminal(target):
            expression += " REMOVE active_pk"
        update = {
            "Update": {
                "TableName": self.table_name,
                "Key": serialize(job_key(job_id)),
                "UpdateExpression": expression,
                "ConditionExpression": f"#state IN ({', '.join(placeholders)})",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": serialize(values),
            }
        }
        put_event = {
            "Put": {"TableName": self.table_name, "Item": serialize(self._event_item(event))}
        }
        try:
            self.client.transact_write_items(TransactItems=cast(Any, [update, put_event]))
        except ClientError as exc:
            if not _is_condition_failure(exc):
                raise
            raise StateConflict(self.get_job(job_id)) from None
        found = self.get_job(job_id)
        if found is None:  # deleted in between: only by hand
            raise StateConflict(None)
        return found

    # generations ---------------------------------------------------------------------------

    def put_generation(self, generation: Generation) -> None:
        item = {
            **generation_key(generation.job_id, generation.generation),
            **generation.model_dump(mode="json", exclude_none=True),
        }
        self.client.put_item(TableName=self.table_name, Item=serialize(item))

    def get_generation(self, job_id: str, generation: int) -> Generation | None:
        item = self._get(generation_key(job_id, generation))
        return Generation.model_validate(_strip_keys(item)) if item else None

    def load_heartbeat_context(
        self, job_id: str, generation: int
    ) -> tuple[Job | None, Generation | None, float | None]:
        """The job, the generation and the supervisor pulse, in one BatchGetItem."""
        keys = [job_key(job_id), generation_key(job_id, generation), PULSE_KEY]
        reply = self.client.batch_get_item(
            RequestItems={
                self.table_name: {"Keys": [serialize(k) for k in keys], "ConsistentRead": True}
            }
        )
        found: dict[str, dict[str, Any]] = {}
        pending = reply.get("UnprocessedKeys", {})
        for item in reply.get("Responses", {}).get(self.table_name, []):
            plain = deserialize(item)
            found[plain["sk"]] = plain
        if pending:  # throttled: fetch the rest one by one rather than fail the heartbeat
            for key in pending[self.table_name]["Keys"]:
                plain_key = deserialize(key)
                item_or_none = self._get(plain_key)
                if item_or_none:
                    found[plain_key["sk"]] = item_or_none
        job_item = found.get("JOB")
        gen_item = found.get(generation_key(job_id, generation)["sk"])
        pulse_item = found.get("PULSE")
        return (
            Job.model_validate(_strip_keys(job_item)) if job_item else None,
            Generation.model_validate(_strip_keys(gen_item)) if gen_item else None,
            float(pulse_item["at"]) if pulse_item else None,
        )

    def store_heartbeat(
        self,
        job_id: str,
        generation: int,
        *,
        token_hash: str,
        heartbeat: Heartbeat,
        lease_expires_at: float,
        training_start_step: int | None = None,
    ) -> bool:
        """One conditional UpdateItem: only the current generation, with this token, writes.
        `training_start_step` given: the first `training` heartbeat also records when and at
        which step training began on this host (kept if already there). False when the
        condition fails (the generation was replaced meanwhile)."""
        expression = "SET heartbeat = :hb, lease_expires_at = :lease"
        values: dict[str, Any] = {
            ":hb": heartbeat.model_dump(mode="json", exclude_none=True),
            ":lease": lease_expires_at,
            ":true": True,
            ":hash": token_hash,
        }
        if training_start_step is not None:
            expression += (
                ", training_started_at = if_not_exists(training_started_at, :at)"
                ", training_start_step = if_not_exists(training_start_step, :step)"
            )
            values[":at"] = heartbeat.at
            values[":step"] = training_start_step
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=serialize(generation_key(job_id, generation)),
                UpdateExpression=expression,
                ConditionExpression="is_current = :true AND token_hash = :hash",
                ExpressionAttributeValues=serialize(values),
            )
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise
        return True

    def list_generations(self, job_id: str) -> list[Generation]:
        """Every generation of a job, oldest first."""
        items = self._query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :gen)",
            ExpressionAttributeValues={":pk": {"S": f"JOB#{job_id}"}, ":gen": {"S": "GEN#"}},
        )
        return [Generation.model_validate(_strip_keys(i)) for i in items]

    def record_generation(
        self,
        generation: Generation,
        *,
        expected: Iterable[JobState],
        now: float,
        event: TimelineEvent,
    ) -> bool:
        """Store a newly rented generation and make it the job's current one (→ RUNNING), in
        one transaction: only while the job is in `expected` and its current generation is the
        one before. False when someone else won (a second rent, a cancel): the caller destroys
        what it rented (invariant 1)."""
        values: dict[str, Any] = {
            ":running": JobState.RUNNING.value,
            ":now": now,
            ":gen": generation.generation,
            ":prev": generation.generation - 1,
        }
        placeholders = []
        for i, state in enumerate(expected):
            values[f":e{i}"] = state.value
            placeholders.append(f":e{i}")
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": serialize(
                        {
                            **generation_key(generation.job_id, generation.generation),
                            **generation.model_dump(mode="json", exclude_none=True),
                        }
                    ),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": serialize(job_key(generation.job_id)),
                    "UpdateExpression": "SET previous_state = #state, #state = :running, "
                    "updated_at = :now, current_generation = :gen",
                    "ConditionExpression": f"#state IN ({', '.join(placeholders)}) "
                    "AND current_generation = :prev",
                    "ExpressionAttributeNames": {"#state": "state"},
                    "ExpressionAttributeValues": serialize(values),
                }
            },
            {"Put": {"TableName": self.table_name, "Item": serialize(self._event_item(event))}},
        ]
        try:
            self.client.transact_write_items(TransactItems=cast(Any, items))
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise
        return True

    def update_generation(
        self,
        job_id: str,
        generation: int,
        updates: Mapping[str, Any],
        *,
        only_if_current: bool = False,
    ) -> bool:
        """SET fields of an existing generation; False when it does not exist (or, with
        `only_if_current`, was superseded meanwhile)."""
        if not updates:
            return True
        expression, names, values = _set_clause(updates)
        condition = "attribute_exists(pk)"
        if only_if_current:
            condition += " AND is_current = :true"
            values[":true"] = True
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=serialize(generation_key(job_id, generation)),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=serialize(values),
            )
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise
        return True

    def update_job_fields(self, job_id: str, updates: Mapping[str, Any]) -> bool:
        """SET plain fields (spend, restarts) without a state change; False if no such job."""
        expression, names, values = _set_clause(updates)
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key=serialize(job_key(job_id)),
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=serialize(values),
            )
        except ClientError as exc:
            if _is_condition_failure(exc):
                return False
            raise
        return True

    # host reputation ----------------------------------------------------------------------

    def record_host_failure(
        self, machine_id: int, *, failure: str, kind: str, now: float, avoid_until: float
    ) -> None:
        """Remember that `machine_id` failed a job generation. `failure` (`<job>:g<n>`) goes
        into a string set, so overlapping monitor runs count one failure once."""
        self.client.update_item(
            TableName=self.table_name,
            Key=serialize(host_key(machine_id)),
            UpdateExpression="ADD failures :f, #kind :f SET machine_id = :m, "
            "last_failure_at = :now, avoid_until = :until",
            ExpressionAttributeNames={"#kind": f"{kind}_failures"},
            ExpressionAttributeValues={
                ":f": {"SS": [failure]},
                ":m": {"N": str(machine_id)},
                ":now": serialize({"v": now})["v"],
                ":until": serialize({"v": avoid_until})["v"],
            },
        )

    def host_reputations(self, machine_ids: Iterable[int]) -> dict[int, HostReputation]:
        """The reputation items of these machines (missing ones: never failed)."""
        ids = sorted(set(machine_ids))
        found: dict[int, HostReputation] = {}
        for start in range(0, len(ids), 100):  # BatchGetItem takes at most 100 keys
            keys = [serialize(host_key(i)) for i in ids[start : start + 100]]
            request: dict[str, Any] = {self.table_name: {"Keys": keys}}
            while request:
                reply = self.client.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(self.table_name, []):
                    plain = deserialize(item)
                    reputation = HostReputation(
                        machine_id=int(plain["machine_id"]),
                        failures=len(plain.get("failures", ())),
                        dead_failures=len(plain.get("dead_failures", ())),
                        hung_failures=len(plain.get("hung_failures", ())),
                        last_failure_at=float(plain.get("last_failure_at", 0)),
                        avoid_until=float(plain.get("avoid_until", 0)),
                    )
                    found[reputation.machine_id] = reputation
                request = reply.get("UnprocessedKeys") or {}
        return found

    # events, pulse ------------------------------------------------------------------------

    def append_event(self, event: TimelineEvent) -> None:
        self.client.put_item(TableName=self.table_name, Item=serialize(self._event_item(event)))

    def write_pulse(self, at: float) -> None:
        self.client.put_item(TableName=self.table_name, Item=serialize({**PULSE_KEY, "at": at}))

    def read_pulse(self) -> float | None:
        item = self._get(PULSE_KEY)
        return float(item["at"]) if item else None

    # helpers ------------------------------------------------------------------------------

    @staticmethod
    def _event_item(event: TimelineEvent) -> dict[str, Any]:
        return {**event_key(event), **event.model_dump(mode="json")}

    def _get(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        reply = self.client.get_item(
            TableName=self.table_name, Key=serialize(key), ConsistentRead=True
        )
        item = reply.get("Item")
        return deserialize(item) if item else None

    def _query_all(self, **kwargs: Any) -> Sequence[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: Any = None
        while True:
            if start:
                kwargs["ExclusiveStartKey"] = start
            reply = self.client.query(TableName=self.table_name, **kwargs)
            items.extend(deserialize(i) for i in reply.get("Items", []))
            start = reply.get("LastEvaluatedKey")
            if not start:
                return items
