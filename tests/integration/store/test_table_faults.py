"""The table adapter under DynamoDB's refusals that moto does not make on its own
(`tether_local.aws.dynamo_faults`): a transaction cancelled for a conflict or throttling is asked
again and is never read as a failed condition; unprocessed keys of a BatchGetItem are asked
again; a refusal that lasts ends in `TableBusy` after the bound."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from functions.adapters.job_records import StateConflict
from functions.adapters.store import JobStore
from functions.adapters.table import TRANSIENT_ATTEMPTS, TableBusy, create_table
from functions.domain.job import JobState, TimelineEvent, new_job
from functions.domain.jobspec import parse_job
from tests.integration.api.helpers import SPEC
from tether_local.aws.dynamo_faults import DynamoFaults

TABLE = "tether-faults"
NOW = 1_800_000_000.0
JOB_ID = "tiny-cpu-0000abcd"


class Waits:
    """The store's sleep: records the back-off instead of waiting it."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


@pytest.fixture
def waits() -> Waits:
    return Waits()


@pytest.fixture
def store(waits: Waits) -> Iterator[JobStore]:
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        create_table(ddb, TABLE)
        found = JobStore(TABLE, ddb, sleep=waits)
        job, event = new_job(parse_job(SPEC), job_id=JOB_ID, now=NOW, submitted_by="me")
        found.create_job(job, event)
        yield found


def provision(store: JobStore, expected: JobState = JobState.PENDING) -> Any:
    event = TimelineEvent(job_id=JOB_ID, at=NOW + 1, kind="provisioning", message="renting")
    return store.transition_job(
        JOB_ID, JobState.PROVISIONING, expected=[expected], now=NOW + 1, event=event
    )


def events(store: JobStore, kind: str) -> list[TimelineEvent]:
    view = store.get_job_view(JOB_ID)
    assert view is not None
    return [e for e in view.events if e.kind == kind]


def test_a_transaction_cancelled_for_a_conflict_is_retried_and_written_once(
    store: JobStore, waits: Waits
) -> None:
    with DynamoFaults(seed=1, conflict_rate=1.0, max_faults=1) as faults:
        job = provision(store)
    assert faults.injected == {"TransactionConflict": 1}
    assert job.state is JobState.PROVISIONING
    assert len(events(store, "provisioning")) == 1
    assert len(waits.seconds) == 1 and 0 < waits.seconds[0] < 1


def test_a_failed_condition_is_still_a_state_conflict(store: JobStore, waits: Waits) -> None:
    with DynamoFaults(seed=2), pytest.raises(StateConflict) as raised:
        provision(store, expected=JobState.RUNNING)
    assert raised.value.job is not None and raised.value.job.state is JobState.PENDING
    assert waits.seconds == []  # a refusal on the merits is not asked again


def test_a_persistent_throttle_ends_in_table_busy_not_a_state_conflict(
    store: JobStore, waits: Waits
) -> None:
    with DynamoFaults(seed=3, throttle_rate=1.0) as faults, pytest.raises(TableBusy):
        provision(store)
    assert faults.injected == {"ThrottlingError": TRANSIENT_ATTEMPTS}
    assert len(waits.seconds) == TRANSIENT_ATTEMPTS - 1
    assert sum(waits.seconds) < 1.5
    job = store.get_job(JOB_ID)
    assert job is not None and job.state is JobState.PENDING  # nothing was written
    assert events(store, "provisioning") == []


def test_a_conflicted_create_with_an_idempotency_key_is_retried(store: JobStore) -> None:
    job, event = new_job(parse_job(SPEC), job_id="tiny-cpu-0000beef", now=NOW, submitted_by="me")
    with DynamoFaults(seed=4, conflict_rate=1.0, max_faults=2):
        stored, created = store.create_job(
            job, event, idempotency=("key-1", "hash-1"), idempotency_expires_at=NOW + 86400
        )
    assert created and stored.job_id == job.job_id
    assert store.get_job(job.job_id) is not None


def test_batch_get_with_unprocessed_keys_still_returns_every_item(
    store: JobStore, waits: Waits
) -> None:
    ids = list(range(1, 41))
    for instance_id in ids:
        store.record_first_sighting(instance_id, NOW + instance_id)
    with DynamoFaults(seed=5, unprocessed_rate=0.5, max_faults=30) as faults:
        found = store.first_sightings(ids)
    assert faults.injected["UnprocessedKeys"] > 0
    assert found == {i: NOW + i for i in ids}
    assert waits.seconds  # asked again after a pause


def test_batch_get_unprocessed_for_good_ends_in_table_busy(store: JobStore, waits: Waits) -> None:
    for instance_id in (1, 2):
        store.record_first_sighting(instance_id, NOW)
    with DynamoFaults(seed=6, unprocessed_rate=1.0), pytest.raises(TableBusy):
        store.first_sightings([1, 2])
    assert len(waits.seconds) == TRANSIENT_ATTEMPTS - 1


def test_faults_are_off_once_closed(store: JobStore, waits: Waits) -> None:
    with DynamoFaults(seed=7, conflict_rate=1.0, throttle_rate=0.0):
        pass
    assert provision(store).state is JobState.PROVISIONING
    assert waits.seconds == []
