"""One DynamoDB write per changed job and run (docs/architecture.md#spend): the job's spend travels
with the current generation's observation and `supervised_at` (`record_supervised`); the job item —
billed three times for its two indexes, all on the ActiveJobs index's one partition — gets its
`spent_usd` only when it lags by a step (1 % of the budget, at least a cent) or when a transition is
named (`functions/domain/spend.py`, `job_item_spend_due`). Calls are counted with botocore's event
hooks (`bench/lib/meter.py`); nothing here is timed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from functions.adapters.store import JobStore
from functions.adapters.table import job_key
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Heartbeat, known_spend_usd
from functions.domain.reconcile import Observation
from tests.integration.monitor.test_monitor_at_scale import World, world


@pytest.fixture
def small() -> Iterator[World]:
    yield from world(30)


def beat_all(w: World, step: int) -> None:
    """Fresh heartbeats with progress for every job, so no verdict but the one planted fires."""
    for job in w.store.list_active_jobs():
        beat = Heartbeat(
            at=w.clock() - 5, agent_time=w.clock() - 5, phase="training", step=step,
            gpu=GpuProbe(available=True, utilization_pct=90.0),
        )  # fmt: skip
        lease = w.clock() + job.spec.policy.lease_window_s
        w.store.store_heartbeat(
            job.job_id, 1, token_hash="0" * 64, heartbeat=beat, lease_expires_at=lease
        )


def job_spend_writes(w: World, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Every `record_spend` (the job item's spend) the runs make, in order."""
    written: list[tuple[str, float]] = []
    real = JobStore.record_spend

    def record_spend(self: JobStore, job_id: str, spent_usd: float) -> bool:
        written.append((job_id, spent_usd))
        return real(self, job_id, spent_usd)

    monkeypatch.setattr(JobStore, "record_spend", record_spend)
    return written


def spends(w: World, job_id: str) -> tuple[float, float]:
    """(the job item's `spent_usd`, the current generation's `job_spent_usd`)."""
    job, generation = w.store.get_job(job_id), w.store.get_generation(job_id, 1)
    assert job is not None and generation is not None
    return job.spent_usd, generation.job_spent_usd


def test_a_run_makes_one_write_per_running_job_whose_spend_moved(
    small: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = job_spend_writes(small, monkeypatch)
    small.clock.now += 60

    report = small.run()

    assert (report.supervised, report.verdicts) == (30, {"healthy": 30})
    assert small.updates() == 30  # the observation with the job's spend and supervised_at
    calls = small.meter.calls
    # + the ActiveJobs reads (the legacy partition's Query, one Scan page of the index) and 1
    # BatchGetItem
    assert sum(v for k, v in calls.items() if k.startswith("dynamodb.")) == 3 + 30
    assert written == []  # $1,000 budgets: a step is $10, far from a few minutes of a host
    for job in small.store.list_active_jobs():
        stored, carried = spends(small, job.job_id)
        assert stored == 0 and carried > 0  # the exact figure is on the generation
        generation = small.store.get_generation(job.job_id, 1)
        assert generation is not None and generation.supervised_at == small.clock()
        assert known_spend_usd(job, [generation]) == carried


def test_the_job_items_spend_is_written_when_it_lags_by_a_step(
    small: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = "bench-00003"
    small.clock.now += 60
    small.run()
    _, first = spends(small, job_id)
    small.clock.now += 60
    beat_all(small, 1_000)
    small.run()
    _, second = spends(small, job_id)
    per_minute = second - first
    assert per_minute > 0
    # A budget whose step (1 %) is 2.5 minutes of spend past the last run's figure.
    budget = 100 * (second + 2.5 * per_minute)
    small.store._table.set_fields(job_key(job_id), {"budget_usd": budget})
    written = job_spend_writes(small, monkeypatch)

    runs = []
    for minute in range(1, 4):
        small.clock.now += 60
        beat_all(small, 1_000 + minute)
        report = small.run()
        assert (report.supervised, report.verdicts) == (30, {"healthy": 30})
        runs.append((small.updates(), spends(small, job_id)))

    assert [updates for updates, _ in runs] == [30, 30, 31]  # one job item, at the step
    (_, (stored_1, carried_1)), (_, (stored_2, _)), (_, (stored_3, carried_3)) = runs
    assert stored_1 == stored_2 == 0 and carried_1 > second
    assert written == [(job_id, carried_3)] and stored_3 == carried_3
    assert carried_3 - 0 >= budget / 100


def test_the_job_items_spend_is_written_when_the_job_is_stopped(
    small: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = "bench-00005"
    small.clock.now += 60
    small.run()
    _, carried = spends(small, job_id)
    # Over budget by the next run, less than a step (a cent) from the figure measured.
    small.store._table.set_fields(job_key(job_id), {"budget_usd": carried + 0.001})
    written = job_spend_writes(small, monkeypatch)
    small.clock.now += 60
    beat_all(small, 2_000)

    report = small.run()

    assert report.verdicts == {"healthy": 29, "over_budget": 1}
    assert report.transitions_started == 1
    stored, carried_now = spends(small, job_id)
    assert written == [(job_id, carried_now)] and stored == carried_now > carried
    assert small.updates() == 30 + 1  # the observations, and this job item


def test_an_overlapping_run_with_older_facts_never_lowers_the_generations_figure(
    small: World,
) -> None:
    small.clock.now += 60
    small.run()
    newer = small.store.get_generation("bench-00007", 1)
    assert newer is not None and newer.job_spent_usd > 0
    older = Observation(spend_usd=0.001, job_spent_usd=newer.job_spent_usd / 2)

    written = small.store.record_supervised("bench-00007", 1, older, at=small.clock() - 90)

    after = small.store.get_generation("bench-00007", 1)
    assert written is False and after == newer  # nothing of the older run's write
    same = Observation(spend_usd=newer.spend_usd, job_spent_usd=newer.job_spent_usd)
    assert small.store.record_supervised("bench-00007", 1, same, at=small.clock())
