"""DynamoDB data access: `JobStore`, every read and write of the tether table.

Callers speak the domain: a method per thing that happens (`create_job`, `transition_job`,
`record_generation`, `supersede_generation`, `end_generation`, `store_heartbeat`,
`record_checkpoints`, `store_credentials`, `record_supervised`, `record_spend`,
`record_incident`, `record_host_failure`, …), never a dict of attribute names. The items, keys,
indexes and the codec between items and records are `functions/adapters/table.py`.

Why one file past 500 lines: one class is the table's only reader and writer, so every
condition that keeps a write safe (current generation only, spend only upwards, one blame per
failure, checkpoints recorded only from the current generation) is in one place to review; its
transactions span a job and its generations (`record_generation`, `record_checkpoints`), so
splitting the class by item would split them; what is below the level of jobs and generations
already lives in `table.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.exceptions import ClientError

from functions.adapters.table import (
    ACTIVE_INDEX,
    ACTIVE_PARTITION,
    ALL_JOBS_INDEX,
    JOBS_PARTITION,
    TTL_ATTRIBUTE,
    Table,
    as_event,
    as_generation,
    as_job,
    as_reputation,
    condition_check,
    decode_page_token,
    deserialize,
    encode_page_token,
    event_item,
    generation_item,
    generation_key,
    host_key,
    idempotency_key,
    is_condition_failure,
    job_item,
    job_key,
    job_partition,
    serialize,
    serialize_value,
    set_clause,
    sighting_key,
    state_in,
)
from functions.domain.blame import blamed_again
from functions.domain.heartbeat import CheckpointRef, StorageCredentials
from functions.domain.job import (
    ACTIVE_STATES,
    Generation,
    GenerationStatus,
    Heartbeat,
    HostReputation,
    Job,
    JobState,
    StopReason,
    TimelineEvent,
    UnrecordedInstance,
    is_terminal,
)
from functions.domain.reconcile import Observation, StatusClock
from functions.domain.recovery import Resumed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
else:
    DynamoDBClient = Any

SIGHTING_TTL_S = 7 * 86_400
BLAME_WRITE_ATTEMPTS = 5


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


@dataclass(frozen=True)
class ActiveJobs:
    jobs: list[Job]
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (pk, why)


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


class JobStore:
    """Every read and write of the tether table. `client=None` builds a default client."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table_name = table_name
        self.client: DynamoDBClient = client or boto3.client("dynamodb")
        self._table = Table(table_name, self.client)

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
            self.client.transact_write_items(TransactItems=cast(Any, items))
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
        generations = []
        for item in items:
            if item["sk"] == "JOB":
                job = as_job(item)
            elif item["sk"].startswith("GEN#"):
                generations.append(as_generation(item))
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
        """Newest first. An active state (or none) reads the all-jobs index; a state filter
        is a FilterExpression, so a page is filled by reading on until `limit` jobs match.
        Raises `BadPageToken` for a token this store did not hand out."""
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
            jobs.extend(as_job(deserialize(i)) for i in reply["Items"])
            start_key = reply.get("LastEvaluatedKey")
            if not start_key or len(jobs) >= limit:
                break
        return JobPage(jobs=jobs, next_token=encode_page_token(start_key) if start_key else None)

    def list_active_jobs(self) -> list[Job]:
        """Every active job (the monitor's view), oldest first."""
        return self.read_active_jobs().jobs

    def read_active_jobs(self) -> ActiveJobs:
        """Every active job, oldest first, each read on its own: an item that no longer
        validates (written by another version, edited by hand) is named in `unreadable`
        with why, and hides no other job."""
        items = self._table.query_all(
            IndexName=ACTIVE_INDEX,
            KeyConditionExpression="active_pk = :p",
            ExpressionAttributeValues={":p": {"S": ACTIVE_PARTITION}},
        )
        jobs: list[Job] = []
        unreadable: list[tuple[str, str]] = []
        for item in items:
            try:
                jobs.append(as_job(item))
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                unreadable.append((str(item.get("pk", "?")), str(exc)[:300]))
        return ActiveJobs(jobs=jobs, unreadable=unreadable)

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

    def record_spend(self, job_id: str, spent_usd: float) -> bool:
        """The job's spend as the monitor measured it, only upwards: overlapping monitor runs
        (or a run that could not read Vast's charges) never lower it. False when it was not
        written (no such job, or a higher spend is stored)."""
        return self._table.update(
            job_key(job_id),
            UpdateExpression="SET spent_usd = :s",
            ConditionExpression="attribute_exists(pk) AND "
            "(attribute_not_exists(spent_usd) OR spent_usd < :s)",
            ExpressionAttributeValues=serialize({":s": spent_usd}),
        )

    def record_unrecorded_instances(
        self, job_id: str, sightings: Iterable[UnrecordedInstance]
    ) -> bool:
        """Sightings of the job's instances that no generation records (each under its id, so
        the cost of an instance destroyed since stays counted). False if no such job."""
        fields = {str(s.instance_id): s.model_dump(mode="json") for s in sightings}
        if not fields:
            return True
        key = job_key(job_id)
        if not self._table.update(  # the map, for jobs stored before it existed
            key,
            UpdateExpression="SET unrecorded_instances = if_not_exists(unrecorded_instances, :e)",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues=serialize({":e": {}}),
        ):
            return False
        names = {"#m": "unrecorded_instances"}
        values: dict[str, Any] = {}
        sets = []
        for i, (instance_id, sighting) in enumerate(fields.items()):
            names[f"#i{i}"] = instance_id
            values[f":i{i}"] = sighting
            sets.append(f"#m.#i{i} = :i{i}")
        return self._table.update(
            key,
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
        )

    def record_incident(self, job_id: str, *, at: float, reason: str, generation: int) -> bool:
        """A replace was started at `at` for `reason`, ending `generation`: the heartbeat API
        measures detection → training resumed from it. False if no such job."""
        fields = {"incident_at": at, "incident_reason": reason, "incident_generation": generation}
        return self._table.set_fields(job_key(job_id), fields)

    # generations ---------------------------------------------------------------------------

    def put_generation(self, generation: Generation) -> None:
        """Store a generation item as given (no condition)."""
        self._table.put(generation_item(generation))

    def get_generation(self, job_id: str, generation: int) -> Generation | None:
        item = self._table.get(generation_key(job_id, generation))
        return as_generation(item) if item else None

    def list_generations(self, job_id: str) -> list[Generation]:
        """Every generation of a job, oldest first."""
        items = self._table.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :gen)",
            ExpressionAttributeValues={":pk": {"S": job_partition(job_id)}, ":gen": {"S": "GEN#"}},
        )
        return [as_generation(i) for i in items]

    def load_heartbeat_context(
        self, job_id: str, generation: int
    ) -> tuple[Job | None, Generation | None]:
        """The job and the generation, in one BatchGetItem."""
        keys = [job_key(job_id), generation_key(job_id, generation)]
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
                item_or_none = self._table.get(plain_key)
                if item_or_none:
                    found[plain_key["sk"]] = item_or_none
        job_found = found.get("JOB")
        gen_found = found.get(generation_key(job_id, generation)["sk"])
        return (
            as_job(job_found) if job_found else None,
            as_generation(gen_found) if gen_found else None,
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
        gpu_busy: bool = False,
        resumed: Resumed | None = None,
    ) -> bool:
        """The heartbeat and the renewed lease, in one conditional UpdateItem: only the current
        generation, with this token, writes. `training_start_step` given: the first `training`
        heartbeat also records when and at which step training began on this host (kept if
        already there). `gpu_busy`: the GPU was above the job's idle threshold, so
        `gpu_busy_at` moves to this heartbeat (the hung rule's window). False when the
        condition fails (the generation was replaced meanwhile). `resumed` (server clock): the
        step training resumed at and when it started, then the first step after it; each kept
        once written."""
        expression = "SET heartbeat = :hb, lease_expires_at = :lease"
        values: dict[str, Any] = {
            ":hb": heartbeat.model_dump(mode="json", exclude_none=True),
            ":lease": lease_expires_at,
            ":true": True,
            ":hash": token_hash,
        }
        if gpu_busy:
            expression += ", gpu_busy_at = :busy"
            values[":busy"] = heartbeat.at
        if training_start_step is not None:
            expression += (
                ", training_started_at = if_not_exists(training_started_at, :at)"
                ", training_start_step = if_not_exists(training_start_step, :step)"
            )
            values[":at"] = heartbeat.at
            values[":step"] = training_start_step
        if resumed is not None:
            expression += (
                ", resumed_step = if_not_exists(resumed_step, :resumed_step)"
                ", resumed_started_at = if_not_exists(resumed_started_at, :resumed_at)"
            )
            values[":resumed_step"] = resumed.step
            values[":resumed_at"] = resumed.started_at
            if resumed.first_step_at is not None:
                expression += ", first_step_at = if_not_exists(first_step_at, :first_step_at)"
                values[":first_step_at"] = resumed.first_step_at
        return self._table.update(
            generation_key(job_id, generation),
            UpdateExpression=expression,
            ConditionExpression="is_current = :true AND token_hash = :hash",
            ExpressionAttributeValues=serialize(values),
        )

    def record_checkpoints(
        self,
        job_id: str,
        generation: int,
        *,
        token_hash: str,
        checkpoints: Sequence[CheckpointRef],
        previous_version: int,
    ) -> bool:
        """Store the job's recorded checkpoints (newest first) in one transaction, only while
        `generation` is current with this token and the stored list is still version
        `previous_version` (the one `checkpoints` came from). False when either fails: a
        superseded generation records nothing; a lost race is retried by the next heartbeat."""
        values = {
            ":list": [c.model_dump(mode="json", exclude_none=True) for c in checkpoints],
            ":next": previous_version + 1,
            ":prev": previous_version,
            ":gen": generation,
        }
        return self._table.transact(
            [
                condition_check(
                    self.table_name,
                    generation_key(job_id, generation),
                    "is_current = :true AND token_hash = :hash",
                    {":true": True, ":hash": token_hash},
                ),
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": serialize(job_key(job_id)),
                        "UpdateExpression": "SET recorded_checkpoints = :list, "
                        "recorded_checkpoints_version = :next",
                        "ConditionExpression": "current_generation = :gen AND (attribute_not_exists"
                        "(recorded_checkpoints_version) OR recorded_checkpoints_version = :prev)",
                        "ExpressionAttributeValues": serialize(values),
                    }
                },
            ]
        )

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
        in_expected = state_in(expected, values)
        make_current = {
            "Update": {
                "TableName": self.table_name,
                "Key": serialize(job_key(generation.job_id)),
                "UpdateExpression": "SET previous_state = #state, #state = :running, "
                "updated_at = :now, current_generation = :gen",
                "ConditionExpression": f"{in_expected} AND current_generation = :prev",
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": serialize(values),
            }
        }
        return self._table.transact(
            [
                self._put(generation_item(generation), condition="attribute_not_exists(pk)"),
                make_current,
                self._put(event_item(event)),
            ]
        )

    def supersede_generation(self, job_id: str, generation: int, *, host_blamed: bool) -> bool:
        """The generation is no longer current: its agent is told `superseded` at its next
        heartbeat. Not ended yet (see `end_generation`). False if it does not exist."""
        fields = {"is_current": False, "status": "superseded", "host_blamed": host_blamed}
        return self._table.set_fields(generation_key(job_id, generation), fields)

    def end_generation(
        self, job_id: str, generation: int, *, ended_at: float, status: GenerationStatus
    ) -> bool:
        """The generation's instance is gone: its billing ends at `ended_at`."""
        fields = {"ended_at": ended_at, "status": status}
        return self._table.set_fields(generation_key(job_id, generation), fields)

    def store_credentials(
        self, job_id: str, generation: int, credentials: StorageCredentials
    ) -> bool:
        """Fresh storage credentials for the agent's next heartbeat reply; False when the
        generation was superseded meanwhile (its agent gets none)."""
        fields = {"credentials": credentials.model_dump(mode="json")}
        key = generation_key(job_id, generation)
        return self._table.set_fields(key, fields, only_if_current=True)

    def record_supervised(
        self, job_id: str, generation: int, observation: Observation, *, at: float
    ) -> bool:
        """The monitor completed this job's evaluation of the run that started at `at`: what
        it saw (progress and status clocks, spend) and `supervised_at`, the time the
        heartbeat renews leases by; only while the generation is current. Written last, after
        every other action of the evaluation."""
        fields = {**observation.model_dump(exclude_none=True), "supervised_at": at}
        key = generation_key(job_id, generation)
        return self._table.set_fields(key, fields, only_if_current=True)

    def record_status_clock(self, job_id: str, generation: int, clock: StatusClock) -> bool:
        """A replaced generation's status clock (its instance may bill on, stopped or not,
        until the lifecycle destroys it); only until the generation has ended."""
        fields = clock.model_dump(exclude_none=True)
        expression, names, values = set_clause(fields)
        return self._table.update(
            generation_key(job_id, generation),
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(pk) AND attribute_not_exists(ended_at)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
        )

    def record_replacement_cause(self, job_id: str, generation: int, cause: str) -> bool:
        """The verdict a replace of `generation` is started for (the replacement caps count
        these); only while the generation is current."""
        key = generation_key(job_id, generation)
        return self._table.set_fields(key, {"replaced_for": cause}, only_if_current=True)

    # host reputation ----------------------------------------------------------------------

    def record_host_failure(self, machine_id: int, *, failure: str, kind: str, now: float) -> bool:
        """Remember that `machine_id` failed a job generation, and add one blame to its
        decaying weight (`functions/domain/blame.py`). `failure` (`<job>:g<n>`) goes into a
        string set, and the write is conditional on it not being there yet and on the weight
        read, so overlapping monitor runs count one failure once. False when it was counted
        already."""
        for _attempt in range(BLAME_WRITE_ATTEMPTS):
            item = self._table.get(host_key(machine_id))
            if item is not None and failure in item.get("failures", ()):
                return False
            reputation = as_reputation(item) if item is not None else None
            values: dict[str, Any] = {
                ":f": {"SS": [failure]},
                ":m": {"N": str(machine_id)},
                ":now": serialize_value(now),
                ":blame": serialize_value(blamed_again(reputation, now)),
            }
            condition = "attribute_not_exists(pk)"
            if item is not None:
                condition = "NOT contains(failures, :fs) AND "
                values[":fs"] = serialize_value(failure)
                if "blame_at" in item:
                    condition += "blame_at = :seen"
                    values[":seen"] = serialize_value(item["blame_at"])
                else:
                    condition += "attribute_not_exists(blame_at)"
            if self._table.update(
                host_key(machine_id),
                UpdateExpression="ADD failures :f, #kind :f SET machine_id = :m, "
                "last_failure_at = :now, blame = :blame, blame_at = :now",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#kind": f"{kind}_failures"},
                ExpressionAttributeValues=values,
            ):
                return True
        return False  # lost the race every time: another run wrote a blame meanwhile

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
                    reputation = as_reputation(deserialize(item))
                    found[reputation.machine_id] = reputation
                request = reply.get("UnprocessedKeys") or {}
        return found

    # events, first sightings ----------------------------------------------------------------

    def append_event(self, event: TimelineEvent) -> None:
        self._table.put(event_item(event))

    def first_sightings(self, instance_ids: Iterable[int]) -> dict[int, float]:
        """When each of these instances was first seen (those never recorded are missing)."""
        ids = sorted(set(instance_ids))
        found: dict[int, float] = {}
        for start in range(0, len(ids), 100):  # BatchGetItem takes at most 100 keys
            keys = [serialize(sighting_key(i)) for i in ids[start : start + 100]]
            request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
            while request:
                reply = self.client.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(self.table_name, []):
                    plain = deserialize(item)
                    found[int(str(plain["pk"]).split("#", 1)[1])] = float(plain["first_seen"])
                request = reply.get("UnprocessedKeys") or {}
        return found

    def record_first_sighting(self, instance_id: int, at: float) -> bool:
        """The first sighting of an instance listed without a start date (kept if there is
        one already); it expires after a week."""
        return self._table.update(
            sighting_key(instance_id),
            UpdateExpression="SET first_seen = if_not_exists(first_seen, :at), #ttl = :ttl",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
            ExpressionAttributeValues=serialize({":at": at, ":ttl": int(at + SIGHTING_TTL_S)}),
        )

    def _put(self, item: dict[str, Any], *, condition: str | None = None) -> dict[str, Any]:
        """A Put of a transaction."""
        put: dict[str, Any] = {"TableName": self.table_name, "Item": serialize(item)}
        if condition is not None:
            put["ConditionExpression"] = condition
        return {"Put": put}
