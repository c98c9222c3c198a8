"""The monitor's and the lifecycle's pure decisions (functions/domain/supervision.py)."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.heartbeat import GpuProbe
from functions.domain.job import Generation, Heartbeat, HostReputation, Job, JobState, new_job
from functions.domain.jobspec import parse_job
from functions.domain.supervision import (
    InstanceFacts,
    JobSnapshot,
    SupervisionSettings,
    blocklist,
    capacity_attempt,
    capacity_wait_s,
    charges_by_instance,
    find_orphans,
    instance_label,
    parse_label,
    reconcile,
    spend_of,
    stop_reason_for,
)

NOW = 1_800_000_000.0
SETTINGS = SupervisionSettings(interval_s=60, orphan_grace_s=60)
SPEC: dict[str, Any] = {
    "name": "t",
    "image": "python:3.12",
    "run": "python train.py",
    "expected_hours": 1,
    "budget_usd": 10,
}


def job(state: JobState = JobState.RUNNING, generation: int = 1, **fields: Any) -> Job:
    base, _ = new_job(parse_job(SPEC), job_id="t-0123abcd", now=NOW - 600, submitted_by="me")
    return base.model_copy(update={"state": state, "current_generation": generation, **fields})


def gen(
    n: int = 1, *, instance_id: int = 100, beat_age: float | None = 10, **fields: Any
) -> Generation:
    heartbeat = None
    if beat_age is not None:
        heartbeat = Heartbeat(
            at=NOW - beat_age, agent_time=NOW, phase="training", step=3,
            gpu=GpuProbe(available=True, utilization_pct=90.0),
        )  # fmt: skip
    values: dict[str, Any] = {
        "job_id": "t-0123abcd", "generation": n, "token_hash": "x", "instance_id": instance_id,
        "machine_id": 7, "usd_per_hour": 0.5, "created_at": NOW - 600, "heartbeat": heartbeat,
        "prices": {"gpu_usd_per_hour": 0.4, "storage_usd_per_hour": 0.1,
                   "inet_down_usd_per_gb": 0.01, "inet_up_usd_per_gb": 0.02},
    }  # fmt: skip
    values.update(fields)
    return Generation(**values)


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


def test_spend_is_price_times_seconds_plus_traffic_and_vast_wins_when_higher() -> None:
    g = gen().model_copy(
        update={"heartbeat": gen().heartbeat.model_copy(update={"bytes_downloaded": 10**10})}  # type: ignore[union-attr]
    )
    spend = spend_of(g, NOW)
    assert spend.estimated_usd == pytest.approx(0.5 * 600 / 3600 + 10 * 0.01)
    assert spend_of(g, NOW, vast_charged_usd=5.0).total_usd == 5.0
    ended = g.model_copy(update={"ended_at": NOW - 300})
    assert spend_of(ended, NOW).gpu_usd == pytest.approx(0.4 * 300 / 3600)


def test_healthy_job_gets_no_transition_and_its_credentials_renewed_when_missing() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), running())
    assert d.verdict.health == "healthy" and d.transition is None and d.renew_credentials


def test_dead_instance_starts_replace_of_the_next_generation_and_blames_the_host() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), running("offline"))
    assert d.transition.action == "replace" and d.transition.generation == 2
    assert d.transition.execution_name == "t-0123abcd-replace-g2"
    assert d.blame is not None and d.blame.machine_id == 7 and d.blame.failure == "t-0123abcd:g1"


def test_failed_vast_list_applies_no_instance_rule_and_renews_nothing() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), None)
    assert d.verdict.health == "healthy" and d.transition is None and not d.renew_credentials


def test_over_budget_starts_a_stop() -> None:
    d = decide(JobSnapshot(job=job(budget_usd=0.05), generations=(gen(),)), running())
    assert d.verdict.health == "over_budget" and d.transition.action == "stop"
    assert stop_reason_for(d.transition.reason) == "over_budget"


def test_stopping_job_gets_its_stop_started_again_and_renting_jobs_are_not_judged() -> None:
    stopping = decide(JobSnapshot(job=job(JobState.STOPPING, stop_reason="cancelled")), running())
    assert stopping.transition.execution_name == "t-0123abcd-stop"
    renting = decide(JobSnapshot(job=job(JobState.REPLACING)), running())
    assert renting.transition is None and renting.verdict is None


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


def test_capacity_backoff_doubles_to_ten_minutes_and_inverts() -> None:
    assert [capacity_wait_s(a) for a in range(1, 7)] == [60, 120, 240, 480, 600, 600]
    assert capacity_attempt(0) == 1 and capacity_attempt(180) == 3 and capacity_attempt(179) == 2


def test_blocklist_holds_blamed_machines_and_hosts_still_avoided() -> None:
    generations = [gen(1, machine_id=1, host_blamed=True), gen(2, machine_id=2)]
    reputations = {
        3: HostReputation(machine_id=3, avoid_until=NOW + 1),
        4: HostReputation(machine_id=4, avoid_until=NOW - 1),
    }
    assert blocklist(generations, reputations, now=NOW) == {1, 3}


def test_charges_sum_per_instance() -> None:
    rows: list[dict[str, Any]] = [
        {"amount": 1.5, "metadata": {"instance_id": 9}},
        {"amount": 0.5, "metadata": {"instance_id": 9}},
        {"amount": 2},
    ]
    assert charges_by_instance(rows) == {9: 2.0}
