"""`GenerationRecords`: a job's generations (one per rented host): rent one in (making it
current), its heartbeats and lease, checkpoints recorded from it, credentials, what the
monitor saw of it, and its supersede and end."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from functions.adapters.heartbeat_items import is_generation_item, merged_generation_items
from functions.adapters.store_base import StoreBase
from functions.adapters.table import (
    as_generation,
    as_job,
    condition_check,
    deserialize,
    event_item,
    generation_item,
    generation_key,
    heartbeat_key,
    job_key,
    job_partition,
    serialize,
    set_clause,
    state_in,
)
from functions.domain.heartbeat_contract import CheckpointRef, StorageCredentials
from functions.domain.heartbeat_item import hot_part, needs_generation_write
from functions.domain.job import (
    Generation,
    GenerationStatus,
    Heartbeat,
    Job,
    JobState,
    TimelineEvent,
)
from functions.domain.recovery import Resumed
from functions.domain.supervision_facts import Observation, StatusClock

# The item holds no heartbeat received after `:received`. Equal passes: API Gateway's clock
# counts milliseconds, and one agent sends one heartbeat at a time.
NOT_OLDER_THAN = (
    "(attribute_not_exists(heartbeat.received_at) OR heartbeat.received_at <= :received)"
)


class GenerationRecords(StoreBase):
    """The generation items; the transactions that also touch the job (`record_generation`,
    `record_checkpoints`) are here, conditional on the generation being current."""

    def put_generation(self, generation: Generation) -> None:
        """Store a generation item as given (no condition)."""
        self._table.put(generation_item(generation))

    def get_generation(self, job_id: str, generation: int) -> Generation | None:
        """The generation with its heartbeat item merged in, in one BatchGetItem."""
        merged = merged_generation_items(self._generation_items(job_id, generation))
        return as_generation(merged[0]) if merged else None

    def _generation_items(self, job_id: str, generation: int) -> list[dict[str, Any]]:
        """The generation item and its heartbeat item as stored (plain), in one consistent
        BatchGetItem; either may be missing."""
        keys = [generation_key(job_id, generation), heartbeat_key(job_id, generation)]
        request = {self.table_name: {"Keys": [serialize(k) for k in keys], "ConsistentRead": True}}
        return [deserialize(i) for i in self._table.batch_get(request)[self.table_name]]

    def list_generations(self, job_id: str) -> list[Generation]:
        """Every generation of a job, oldest first (the Query returns their heartbeat items
        too: merged in)."""
        items = self._table.query_all(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :gen)",
            ExpressionAttributeValues={":pk": {"S": job_partition(job_id)}, ":gen": {"S": "GEN#"}},
        )
        return [as_generation(i) for i in merged_generation_items(items)]

    def load_heartbeat_context(
        self, job_id: str, generation: int
    ) -> tuple[Job | None, Generation | None]:
        """The job and the generation with its heartbeat item merged in, in one BatchGetItem."""
        keys = [
            job_key(job_id),
            generation_key(job_id, generation),
            heartbeat_key(job_id, generation),
        ]
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
        gen_found = merged_generation_items(v for k, v in found.items() if k != "JOB")
        return (
            as_job(job_found) if job_found else None,
            as_generation(gen_found[0]) if gen_found else None,
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
        previous: Generation | None = None,
    ) -> bool:
        """The heartbeat and the renewed lease, onto the generation's heartbeat item in one
        UpdateItem of under 1 KB (functions/domain/heartbeat_item.py), conditional on that
        item: only the current generation, with this token, writes. The generation item is
        written first, conditional the same way, only when `needs_generation_write` says so
        against `previous` (the generation as read for this heartbeat; None: always): the
        generation's first heartbeat since it has a heartbeat item, a changed rare part, or
        a field kept once. `training_start_step` given: the first `training` heartbeat also
        records when and at which step training began on this host (kept if already there).
        `gpu_busy`: the GPU was above the job's idle threshold, so `gpu_busy_at` moves to this
        heartbeat (the hung rule's window). False when a condition fails (the generation was
        replaced meanwhile). `resumed` (server clock): the step training resumed at and when
        it started, then the first step after it; each kept once written.

        In order of receipt: a heartbeat with `received_at` is written onto neither item when
        that item holds one received later (`NOT_OLDER_THAN`). API Gateway can run an older
        heartbeat's invocation past a newer one's (a cold start, a throttled read, the agent
        timing out and sending the next), and its write would put back an earlier phase, step
        or checkpoint and lose the outputs a finished heartbeat reported.
        `stale_heartbeat` tells that refusal from a replaced generation's."""
        stored = heartbeat.model_dump(mode="json", exclude_none=True)
        first_write = previous is None or not previous.heartbeat_item
        if needs_generation_write(
            previous, stored, training_start_step=training_start_step, resumed=resumed
        ) and not self._store_heartbeat_on_generation(
            job_id,
            generation,
            token_hash=token_hash,
            heartbeat=stored,
            at=heartbeat.at,
            received_at=heartbeat.received_at,
            training_start_step=training_start_step,
            resumed=resumed,
        ):
            return False
        expression = (
            "SET heartbeat = :hb, lease_expires_at = :lease, is_current = :true, token_hash = :hash"
        )
        values: dict[str, Any] = {
            ":hb": hot_part(stored),
            ":lease": lease_expires_at,
            ":true": True,
            ":hash": token_hash,
        }
        if gpu_busy:
            expression += ", gpu_busy_at = :busy"
            values[":busy"] = heartbeat.at
        # Absent only before the generation's first heartbeat since the change (a supersede
        # writes the item too, `supersede_generation`): then the generation item's write just
        # made holds the condition that the generation is current with this token.
        condition = "is_current = :true AND token_hash = :hash"
        if heartbeat.received_at is not None:
            condition += f" AND {NOT_OLDER_THAN}"
            values[":received"] = heartbeat.received_at
        if first_write:
            condition = f"attribute_not_exists(pk) OR ({condition})"
        return self._table.update(
            heartbeat_key(job_id, generation),
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeValues=serialize(values),
        )

    def _store_heartbeat_on_generation(
        self,
        job_id: str,
        generation: int,
        *,
        token_hash: str,
        heartbeat: dict[str, Any],
        at: float,
        received_at: float | None,
        training_start_step: int | None,
        resumed: Resumed | None,
    ) -> bool:
        """The whole heartbeat and the fields kept once onto the generation item, while the
        generation is current with this token and holds no heartbeat received later
        (`store_heartbeat`)."""
        expression = "SET heartbeat = :hb"
        values: dict[str, Any] = {":hb": heartbeat, ":true": True, ":hash": token_hash}
        condition = "is_current = :true AND token_hash = :hash"
        if received_at is not None:
            condition += f" AND {NOT_OLDER_THAN}"
            values[":received"] = received_at
        if training_start_step is not None:
            expression += (
                ", training_started_at = if_not_exists(training_started_at, :at)"
                ", training_start_step = if_not_exists(training_start_step, :step)"
            )
            values[":at"] = at
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
            ConditionExpression=condition,
            ExpressionAttributeValues=serialize(values),
        )

    def stale_heartbeat(
        self, job_id: str, generation: int, *, token_hash: str, received_at: float | None
    ) -> bool:
        """After `store_heartbeat` refused a heartbeat: True when the generation is still
        current with this token and either of its items holds a heartbeat received after this
        one (the refusal was the order of receipt), False when it was replaced. Both items as
        stored, not merged: a newer heartbeat may have written the generation item and not yet
        its heartbeat item. A consistent read, on this rare path only."""
        if received_at is None:
            return False
        items = self._generation_items(job_id, generation)
        found = next((item for item in items if is_generation_item(item)), None)
        if found is None or found.get("is_current") is not True:
            return False
        if found.get("token_hash") != token_hash:
            return False
        latest = max(float((i.get("heartbeat") or {}).get("received_at") or 0) for i in items)
        return latest > received_at

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
        heartbeat. Not ended yet (see `end_generation`). False if it does not exist. Its
        heartbeat item says so too, in the same transaction, so no heartbeat write holds after
        it (made if absent: a generation from before heartbeat items, or one without a
        heartbeat yet, then never gets one)."""
        fields = {"is_current": False, "status": "superseded", "host_blamed": host_blamed}
        expression, names, values = set_clause(fields)
        return self._table.transact(
            [
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": serialize(generation_key(job_id, generation)),
                        "UpdateExpression": expression,
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": serialize(values),
                    }
                },
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": serialize(heartbeat_key(job_id, generation)),
                        "UpdateExpression": "SET is_current = :false",
                        "ExpressionAttributeValues": serialize({":false": False}),
                    }
                },
            ]
        )

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
        self,
        job_id: str,
        generation: int,
        observation: Observation,
        *,
        at: float,
        renew_lease: bool = True,
    ) -> bool:
        """The monitor completed this job's evaluation of the run that started at `at`: what
        it saw (progress and status clocks, the generation's spend and the whole job's) and
        `supervised_at`, the time the heartbeat renews leases by; only while the generation is
        current. Written last, after every other action of the evaluation: the monitor's one
        write per job and run. The job's spend only moves up (as on the job item): False, and
        nothing written, when an overlapping run with newer facts stored a higher one.
        `renew_lease` False (Vast's charges unread too long: `reconcile.lease_renewable`): the
        observation is written, `supervised_at` is not."""
        fields: dict[str, object] = observation.model_dump(exclude_none=True)
        if renew_lease:  # False: recorded, but the lease is not renewed on it
            fields["supervised_at"] = at
        expression, names, values = set_clause(fields)
        values.update({":true": True, ":spent": observation.job_spent_usd})
        return self._table.update(
            generation_key(job_id, generation),
            UpdateExpression=expression,
            ConditionExpression="attribute_exists(pk) AND is_current = :true AND "
            "(attribute_not_exists(job_spent_usd) OR job_spent_usd <= :spent)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=serialize(values),
        )

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
