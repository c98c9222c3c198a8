"""The monitor's pure decision (functions/domain/reconcile.py), with the labels and transition
reasons it reads and writes."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.job import JobState
from functions.domain.labels import instance_label, parse_label
from functions.domain.reasons import stop_reason_for
from functions.domain.reconcile import (
    InstanceFacts,
    JobSnapshot,
    SupervisionSettings,
    find_orphans,
    reconcile,
)
from tests.unit.domain.builders import NOW, gen, job

SETTINGS = SupervisionSettings(interval_s=60, orphan_grace_s=60)


def running(status: str | None = "running", iid: int = 100) -> list[InstanceFacts]:
    return [
        InstanceFacts(
            id=iid, label="tether:t-0123abcd:g1", actual_status=status, start_date=NOW - 600
        )
    ]


def decide(snapshot: JobSnapshot, instances: list[InstanceFacts] | None) -> Any:
    plan = reconcile(
        [snapshot],
        instances,
        None,
        now=NOW,
        settings=SETTINGS,
        monitor_healthy=instances is not None,
    )
    return plan.decisions[0]


def test_labels_round_trip_and_foreign_labels_are_ignored() -> None:
    assert parse_label(instance_label("t-0123abcd", 12)) == ("t-0123abcd", 12)
    assert parse_label("my-own-box") is None and parse_label(None) is None


def test_healthy_job_gets_no_transition_and_its_credentials_renewed_when_missing() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), running())
    assert d.verdict.health == "healthy" and d.transition is None and d.renew_credentials


def test_dead_instance_starts_replace_of_the_next_generation_and_blames_the_host() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), running("offline"))
    assert d.transition.action == "replace" and d.transition.generation == 2
    assert d.transition.execution_name == "t-0123abcd-replace-g2-a1"
    assert d.blame is not None and d.blame.machine_id == 7 and d.blame.failure == "t-0123abcd:g1"


def test_failed_vast_list_applies_no_instance_rule_and_renews_nothing() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), None)
    assert d.verdict.health == "healthy" and d.transition is None and not d.renew_credentials


def test_over_budget_starts_a_stop() -> None:
    d = decide(JobSnapshot(job=job(budget_usd=0.05), generations=(gen(),)), running())
    assert d.verdict.health == "over_budget" and d.transition.action == "stop"
    assert stop_reason_for(d.transition.reason) == "over_budget"


def test_a_job_in_the_middle_of_a_transition_names_it_every_run() -> None:
    """The repair (functions/monitor/repair.py) starts its next attempt when the last failed."""
    stopping = decide(JobSnapshot(job=job(JobState.STOPPING, stop_reason="cancelled")), running())
    assert stopping.transition.execution_name == "t-0123abcd-stop-a1"
    assert stopping.transition.reason == "cancelled"
    replacing = job(JobState.REPLACING, state_reason="dead: heartbeat 400 s old")
    renting = decide(JobSnapshot(job=replacing, generations=(gen(),)), running())
    assert renting.transition.execution_name == "t-0123abcd-replace-g2-a1"
    assert renting.transition.reason == "dead: heartbeat 400 s old"
    assert renting.verdict is None


@pytest.mark.parametrize(
    ("state", "current", "label_gen", "iid", "orphan"),
    [
        (JobState.RUNNING, 1, 1, 100, False),  # the live instance
        (JobState.RUNNING, 1, 1, 101, True),  # a duplicate of the current generation
        (JobState.RUNNING, 2, 1, 100, True),  # a replaced generation
        (JobState.REPLACING, 1, 2, 101, False),  # being rented right now
        (JobState.RUNNING, 1, 2, 101, True),  # a next generation nobody is renting
    ],
)
def test_orphans(state: JobState, current: int, label_gen: int, iid: int, orphan: bool) -> None:
    snapshot = JobSnapshot(job=job(state, current), generations=(gen(current),))
    facts = [
        InstanceFacts(id=iid, label=instance_label("t-0123abcd", label_gen), start_date=NOW - 120)
    ]
    assert bool(find_orphans([snapshot], facts, now=NOW, settings=SETTINGS)) is orphan


def test_orphans_of_ended_jobs_wait_out_the_grace() -> None:
    facts = [InstanceFacts(id=5, label="tether:gone-0123abcd:g1", start_date=NOW - 30)]
    assert find_orphans([], facts, now=NOW, settings=SETTINGS) == []
    assert find_orphans([], facts, now=NOW + 31, settings=SETTINGS)[0].instance_id == 5


@pytest.mark.parametrize(
    ("stopping_for_s", "orphan"), [(0, False), (59, False), (60, True), (3600, True)]
)
def test_a_stopping_jobs_instances_are_swept_once_its_stop_had_one_grace(
    stopping_for_s: float, orphan: bool
) -> None:
    """Money stops even while the stop's executions keep failing (they are retried meanwhile)."""
    stopping = job(JobState.STOPPING, 1, updated_at=NOW - stopping_for_s, stop_reason="cancelled")
    snapshot = JobSnapshot(job=stopping, generations=(gen(1),))
    facts = [InstanceFacts(id=100, label=instance_label("t-0123abcd", 1), start_date=NOW - 3600)]
    found = find_orphans([snapshot], facts, now=NOW, settings=SETTINGS)
    assert [o.instance_id for o in found] == ([100] if orphan else [])
    if orphan:
        assert found[0].reason == f"its job has been stopping for {stopping_for_s:.0f} s"


def test_a_young_instance_of_a_stopping_job_waits_out_the_grace_too() -> None:
    """A rent that lost the race to a cancel lands in Vast's list before it is destroyed."""
    stopping = job(JobState.STOPPING, 1, updated_at=NOW - 3600, stop_reason="cancelled")
    facts = [InstanceFacts(id=100, label=instance_label("t-0123abcd", 1), start_date=NOW - 10)]
    assert find_orphans([JobSnapshot(job=stopping)], facts, now=NOW, settings=SETTINGS) == []


def test_a_replacing_jobs_old_instance_is_swept_once_its_replace_had_one_grace() -> None:
    replacing = job(JobState.REPLACING, 1, updated_at=NOW - 60, state_reason="dead: gone")
    snapshot = JobSnapshot(job=replacing, generations=(gen(1, is_current=False),))
    facts = [
        InstanceFacts(id=100, label=instance_label("t-0123abcd", 1), start_date=NOW - 3600),
        InstanceFacts(id=101, label=instance_label("t-0123abcd", 2), start_date=NOW - 3600),
    ]
    found = find_orphans([snapshot], facts, now=NOW, settings=SETTINGS)
    assert [(o.instance_id, o.reason) for o in found] == [
        (100, "its job has been replacing generation 1 for 60 s")
    ]
