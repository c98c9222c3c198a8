"""The tether table: one table, on demand, point-in-time recovery (the single-table layout).

- job — `pk=JOB#<id> sk=JOB`: the `Job` record (spec as a map, state, budget, spend — written
  by the monitor only in steps and at transitions, the exact figure is on the current
  generation —, current generation, the recorded checkpoints a new generation may restore and
  their version);
  `list_pk="JOB"` and `created_key` for the all-jobs index; `active_pk="ACTIVE#<slot>"` only
  while the job is active (its label slot in hex: `active_partition`).
- generation (one host attempt) — `pk=JOB#<id> sk=GEN#<nnnn>`: instance id, offer id, machine
  id, GPU model and count, `inet_down` and the prior's pace at the rent (what is learned from it
  is filed under: `functions/domain/pace.py`), $/h, prices, agent token sha256 (`token_hash`),
  status, `is_current`, `lease_expires_at`,
  `heartbeat` (at, agent time, phase, step, GPU probe, last/restored checkpoint, exit code,
  bytes down/up, how the restore went), `credentials` (endpoint, bucket, and the read and the
  write R2 key, each with its secret, session token, expiry and prefix); and what the monitor
  writes each run, in one UpdateItem: the observation (progress and status clocks, the
  generation's `spend_usd`), the job's `job_spent_usd` and `supervised_at`.
- heartbeat (of a generation) — `pk=JOB#<id> sk=GEN#<nnnn>#HB`: what every heartbeat changes
  (`heartbeat`'s hot parts, `lease_expires_at`, `gpu_busy_at`) and copies of `is_current` and
  `token_hash` for its write's condition, under 1 KB; the generation item's `heartbeat` is then
  written only when a rare part changes (`functions/domain/heartbeat_item.py`).
- timeline event — `pk=JOB#<id> sk=EVT#<iso time>#<nnn>#<event id>`: kind, message, data.
- idempotency key — `pk=IDEM#<key> sk=IDEM`: job id, request hash, `expires_at_ttl` (DynamoDB
  TTL removes it after a day).
- host reputation — `pk=HOST#<machine_id> sk=REP`: `failures` (a string set of `<job>:g<n>`, so
  a repeated write counts once), `dead_failures`, `hung_failures`, `last_failure_at`, and the
  decaying blame `blame` as of `blame_at` (written by the monitor, read by the lifecycle's
  planner for the blocklist: `functions/domain/blame.py`).
- first sighting — `pk=INSTANCE#<id> sk=SEEN`: `first_seen` (epoch s) of a labelled instance
  Vast lists without a start date, so its age is known (an orphan without one is still swept);
  `expires_at_ttl` removes it after a week.
- measures of a job name (`functions/domain/pace.py`, `measure_records.py`) —
  `pk=PACE#<name>`: `sk=GPU#<gpu model>#<count>` the training pace (`steps`, `seconds`, `runs`
  added atomically, `gpu_name`, `gpu_count`), `sk=STARTUP#MACHINE#<id>` and
  `sk=STARTUP#GPU#<gpu model>` the fixed start-up (`seconds`, `runs`); each with `samples`, a
  string set of the `<job>:g<n>` that added to it, so a sample counts once.

A generation's `supervised_at` (written by the monitor when it completed that job's
evaluation) is what the heartbeat renews leases by; there is no global pulse. The job's spend
as last measured is the larger of the job item's `spent_usd` and its generations'
`job_spent_usd` (`functions.domain.job.known_spend_usd`).

Indexes (both project all attributes):
- `ActiveJobs` — partition `active_pk`, sort `created_key` (`<iso created>#<id>`). Sparse: the
  attribute is removed when a job becomes terminal, so the monitor reads only live jobs. One
  partition per label slot (`ACTIVE#0` … `ACTIVE#f`, `functions/domain/labels.py`), so a
  monitor shard reads only its own slots' partitions; items written before slots carry
  `ACTIVE` (`ACTIVE_PARTITION`): every run still reads them, and the owning shard moves them to
  their slot's partition, a bounded number a run (`JobRecords.move_to_slot_partitions`).
- `AllJobs` — partition `list_pk`, sort `created_key`: `GET /jobs` newest first without a scan.

`functions/adapters/store.py` (JobStore, its methods in `job_records.py`,
`generation_records.py` and `supervision_records.py`) is the only reader and writer of the
table; this module holds what it needs below the level of jobs and generations: how keys are
spelled, how values become DynamoDB attributes, how a page cursor is encoded, and a thin client
(`Table`) that turns a failed condition into `False` instead of an exception.

A cancelled transaction is a failed condition only when a `CancellationReasons` code is
`ConditionalCheckFailed`; one cancelled for another transaction's conflict or for throttling
(and a BatchGetItem's `UnprocessedKeys`) is asked again with jittered exponential back-off, at
most `TRANSIENT_ATTEMPTS` calls within about a second, then raises `TableBusy`, which callers
let fail the invocation (the Lambda is retried, the monitor counts the job as failed this run).

`TABLE_DEFINITION` is the one definition of keys and indexes; the CDK construct
(`infra/constructs/data.py`), the tests and the local stack all create the table from it.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from functions.domain.job import Generation, HostReputation, Job, JobState, TimelineEvent
from functions.domain.labels import label_slot

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

ACTIVE_INDEX = "ActiveJobs"
ALL_JOBS_INDEX = "AllJobs"
ACTIVE_PARTITION = "ACTIVE"  # the ActiveJobs index's one partition before slots (legacy items)
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

INDEX_KEYS = {
    ACTIVE_INDEX: frozenset({"pk", "sk", "active_pk", "created_key"}),
    ALL_JOBS_INDEX: frozenset({"pk", "sk", "list_pk", "created_key"}),
}
_KEY_ATTRIBUTES = frozenset({"pk", "sk", "active_pk", "list_pk", "created_key", TTL_ATTRIBUTE})


def create_table(client: DynamoDBClient, table_name: str) -> None:
    """Create the table from TABLE_DEFINITION (tests, local stack) and switch its TTL on."""
    client.create_table(TableName=table_name, **TABLE_DEFINITION)
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )


# --- keys ---------------------------------------------------------------------------------


def job_partition(job_id: str) -> str:
    return f"JOB#{job_id}"


def job_key(job_id: str) -> dict[str, str]:
    return {"pk": job_partition(job_id), "sk": "JOB"}


def slot_partition(slot: int) -> str:
    """The ActiveJobs partition of the jobs in label slot `slot`: `ACTIVE#<hex slot>`."""
    return f"{ACTIVE_PARTITION}#{slot:x}"


def active_partition(job_id: str) -> str:
    return slot_partition(label_slot(job_id))


def generation_key(job_id: str, generation: int) -> dict[str, str]:
    return {"pk": job_partition(job_id), "sk": f"GEN#{generation:04d}"}


def heartbeat_key(job_id: str, generation: int) -> dict[str, str]:
    """The generation's heartbeat item (functions/domain/heartbeat_item.py)."""
    return {"pk": job_partition(job_id), "sk": f"GEN#{generation:04d}#HB"}


def event_key(event: TimelineEvent) -> dict[str, str]:
    return {
        "pk": job_partition(event.job_id),
        "sk": f"EVT#{iso(event.at)}#{event.seq:03d}#{event.event_id}",
    }


def idempotency_key(key: str) -> dict[str, str]:
    return {"pk": f"IDEM#{key}", "sk": "IDEM"}


def host_key(machine_id: int) -> dict[str, str]:
    return {"pk": f"HOST#{machine_id}", "sk": "REP"}


def sighting_key(instance_id: int) -> dict[str, str]:
    return {"pk": f"INSTANCE#{instance_id}", "sk": "SEEN"}


def measures_partition(name: str) -> str:
    return f"PACE#{name}"


def pace_key(name: str, gpu_key: str, gpu_count: int) -> dict[str, str]:
    return {"pk": measures_partition(name), "sk": f"GPU#{gpu_key}#{gpu_count}"}


def startup_key(name: str, kind: str, key: str) -> dict[str, str]:
    return {"pk": measures_partition(name), "sk": f"STARTUP#{kind.upper()}#{key}"}


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


def serialize_value(value: Any) -> dict[str, Any]:
    return dict(_serializer.serialize(_to_dynamo_value(value)))


# --- items ⇄ records ----------------------------------------------------------------------


def job_item(job: Job) -> dict[str, Any]:
    item: dict[str, Any] = {
        **job_key(job.job_id),
        **job.model_dump(mode="json"),
        "list_pk": JOBS_PARTITION,
        "created_key": f"{iso(job.created_at)}#{job.job_id}",
    }
    if job.active:
        item["active_pk"] = active_partition(job.job_id)
    return item


def generation_item(generation: Generation) -> dict[str, Any]:
    return {
        **generation_key(generation.job_id, generation.generation),
        **generation.model_dump(mode="json", exclude_none=True),
    }


def event_item(event: TimelineEvent) -> dict[str, Any]:
    return {**event_key(event), **event.model_dump(mode="json")}


def strip_keys(item: Mapping[str, Any]) -> dict[str, Any]:
    """The record's own fields: the item without its keys and index attributes."""
    return {k: v for k, v in item.items() if k not in _KEY_ATTRIBUTES}


def as_job(item: Mapping[str, Any]) -> Job:
    return Job.model_validate(strip_keys(item))


def as_generation(item: Mapping[str, Any]) -> Generation:
    return Generation.model_validate(strip_keys(item))


def as_event(item: Mapping[str, Any]) -> TimelineEvent:
    return TimelineEvent.model_validate(strip_keys(item))


def as_reputation(item: Mapping[str, Any]) -> HostReputation:
    """The string sets of failures, counted."""
    return HostReputation(
        machine_id=int(item["machine_id"]),
        failures=len(item.get("failures", ())),
        dead_failures=len(item.get("dead_failures", ())),
        hung_failures=len(item.get("hung_failures", ())),
        last_failure_at=float(item.get("last_failure_at", 0)),
        blame=float(item.get("blame", 0)),
        blame_at=float(item.get("blame_at", 0)),
    )


# --- page cursors -------------------------------------------------------------------------


class BadPageToken(ValueError):
    """A `next` token that this store did not hand out."""


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
        or set(plain) != INDEX_KEYS[index]
        or not all(isinstance(v, str) and 0 < len(v) <= 256 for v in plain.values())
    ):
        raise BadPageToken("is not a token returned by this API for this filter")
    return serialize(plain)


# --- the client ---------------------------------------------------------------------------


TRANSIENT_ATTEMPTS = 4  # calls in all for a conflicted/throttled transaction or batch read
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 0.4  # the waits between the 4 calls add up to well under a second
CONDITION_FAILED = "ConditionalCheckFailed"
# Cancellation reasons and error codes that say "not now", not "no": asked again.
TRANSIENT_CODES = frozenset(
    {
        "TransactionConflict",
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
        "TransactionConflictException",
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
    }
)
_REASONS_IN_MESSAGE = re.compile(r"specific reasons \[([^\]]*)\]")


class TableBusy(RuntimeError):
    """DynamoDB kept refusing for conflicts or throttling after the bounded retries: a
    transient failure of this call, never a failed condition."""


def cancellation_codes(exc: ClientError) -> list[str]:
    """The `CancellationReasons` codes of a cancelled transaction, one per item (`None` for an
    item that was fine); read from the message when the reasons are not in the response."""
    reasons = exc.response.get("CancellationReasons")
    if isinstance(reasons, list) and reasons:
        return [str(r.get("Code") or "None") for r in reasons if isinstance(r, Mapping)]
    found = _REASONS_IN_MESSAGE.search(exc.response.get("Error", {}).get("Message", ""))
    return [c.strip() for c in found.group(1).split(",")] if found else []


def is_condition_failure(exc: ClientError) -> bool:
    """A failed condition: a conditional write refused, or a transaction cancelled with at least
    one `ConditionalCheckFailed` reason (a transaction cancelled without reasons is read as one,
    as before reasons were told apart)."""
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    codes = cancellation_codes(exc)
    return CONDITION_FAILED in codes or not any(c in TRANSIENT_CODES for c in codes)


def is_transient(exc: ClientError) -> bool:
    """Refused for conflicts or throttling and worth asking again (never a failed condition)."""
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "TransactionCanceledException":
        return not is_condition_failure(exc)
    return code in TRANSIENT_CODES


class Backoff:
    """Jittered exponential waits between at most `TRANSIENT_ATTEMPTS` calls."""

    def __init__(self, sleep: Callable[[float], None], rng: random.Random) -> None:
        self._sleep = sleep
        self._wait_s = FIRST_BACKOFF_S * rng.uniform(1.0, 1.5)
        self._rng = rng
        self.calls = 1

    def another(self) -> bool:
        """Wait before another call; False when the calls are used up."""
        if self.calls >= TRANSIENT_ATTEMPTS:
            return False
        self._sleep(self._wait_s)
        self._wait_s = min(self._wait_s * self._rng.uniform(1.5, 2.0), MAX_BACKOFF_S)
        self.calls += 1
        return True


def set_clause(fields: Mapping[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    """`SET #u0 = :u0, …` with its names and (plain) values."""
    names = {f"#u{i}": name for i, name in enumerate(fields)}
    values = {f":u{i}": value for i, value in enumerate(fields.values())}
    clause = ", ".join(f"#u{i} = :u{i}" for i in range(len(fields)))
    return f"SET {clause}", names, values


def condition_check(
    table_name: str, key: Mapping[str, Any], condition: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """A ConditionCheck of a transaction: the transaction applies only if `condition` holds
    on the item at `key` (plain values)."""
    return {
        "ConditionCheck": {
            "TableName": table_name,
            "Key": serialize(key),
            "ConditionExpression": condition,
            "ExpressionAttributeValues": serialize(values),
        }
    }


def state_in(expected: Iterable[JobState], values: dict[str, Any]) -> str:
    """`#state IN (:e0, …)`, adding the placeholders' values to `values`."""
    placeholders = []
    for i, state in enumerate(expected):
        values[f":e{i}"] = state.value
        placeholders.append(f":e{i}")
    return f"#state IN ({', '.join(placeholders)})"


class Table:
    """One DynamoDB table, read and written with plain (deserialized) items. `sleep` and `rng`
    pace the retries of conflicted and throttled calls (tests pass an instant sleep)."""

    def __init__(
        self,
        name: str,
        client: DynamoDBClient,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.client = client
        self.sleep = sleep
        self._rng = rng if rng is not None else random.Random()

    def backoff(self) -> Backoff:
        return Backoff(self.sleep, self._rng)

    def get(self, key: Mapping[str, Any]) -> dict[str, Any] | None:
        reply = self.client.get_item(TableName=self.name, Key=serialize(key), ConsistentRead=True)
        item = reply.get("Item")
        return deserialize(item) if item else None

    def put(self, item: Mapping[str, Any]) -> None:
        self.client.put_item(TableName=self.name, Item=serialize(item))

    def query_all(self, **kwargs: Any) -> Sequence[dict[str, Any]]:
        return self._all_pages(self.client.query, kwargs)

    def scan_all(self, **kwargs: Any) -> Sequence[dict[str, Any]]:
        """Every item of the table (or of the index `IndexName`), page by page."""
        return self._all_pages(self.client.scan, kwargs)

    def _all_pages(
        self, call: Callable[..., Any], kwargs: dict[str, Any]
    ) -> Sequence[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: Any = None
        while True:
            if start:
                kwargs["ExclusiveStartKey"] = start
            reply = call(TableName=self.name, **kwargs)
            items.extend(deserialize(i) for i in reply.get("Items", []))
            start = reply.get("LastEvaluatedKey")
            if not start:
                return items

    def set_fields(
        self, key: Mapping[str, Any], fields: Mapping[str, Any], *, only_if_current: bool = False
    ) -> bool:
        """SET `fields` on an existing item; False when it does not exist (or, with
        `only_if_current`, is no longer a current generation)."""
        if not fields:
            return True
        expression, names, values = set_clause(fields)
        condition = "attribute_exists(pk)"
        if only_if_current:
            condition += " AND is_current = :true"
            values[":true"] = True
        return self.update(
            key,
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
        )

    def update(self, key: Mapping[str, Any], **kwargs: Any) -> bool:
        """One conditional UpdateItem; False when its condition fails."""
        try:
            self.client.update_item(TableName=self.name, Key=serialize(key), **kwargs)
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise
        return True

    def transact(self, items: Sequence[Mapping[str, Any]]) -> bool:
        """One TransactWriteItems; False when a condition in it fails."""
        try:
            self.transact_write(items)
        except ClientError as exc:
            if is_condition_failure(exc):
                return False
            raise
        return True

    def transact_write(self, items: Sequence[Mapping[str, Any]]) -> None:
        """TransactWriteItems, asked again while it is cancelled for conflicts or throttling
        only; `TableBusy` when the attempts run out. A failed condition raises its ClientError."""
        backoff = self.backoff()
        while True:
            try:
                self.client.transact_write_items(TransactItems=cast(Any, list(items)))
            except ClientError as exc:
                if not is_transient(exc):
                    raise
                if not backoff.another():
                    raise TableBusy(
                        f"TransactWriteItems refused {backoff.calls} times: "
                        f"{', '.join(cancellation_codes(exc)) or exc}"
                    ) from exc
            else:
                return

    def batch_get(self, request: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Every item BatchGetItem `request` (its `RequestItems`) finds, by table, as DynamoDB
        attributes: `UnprocessedKeys` are asked again with back-off; `TableBusy` when keys are
        still unprocessed after `TRANSIENT_ATTEMPTS` calls."""
        found: dict[str, list[dict[str, Any]]] = {name: [] for name in request}
        pending: Mapping[str, Any] = request
        backoff = self.backoff()
        while True:
            reply = self.client.batch_get_item(RequestItems=cast(Any, pending))
            for name, items in reply.get("Responses", {}).items():
                found.setdefault(name, []).extend(cast(Any, items))
            pending = reply.get("UnprocessedKeys") or {}
            if not pending:
                return found
            if not backoff.another():
                left = sum(len(p.get("Keys", [])) for p in pending.values())
                raise TableBusy(f"BatchGetItem left {left} keys unprocessed")
