"""The monitor's pure decision (functions/domain/reconcile.py), with the labels and transition
reasons it reads and writes."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.health import Health
from functions.domain.job import JobState, UnrecordedInstance
from functions.domain.labels import instance_label, parse_label
from functions.domain.move import MoveCheck
from functions.domain.reasons import reason_health, stop_reason_for
from functions.domain.reconcile import (
    InstanceFacts,
    JobSnapshot,
    SupervisionSettings,
    decide_job,
    find_orphans,
    reconcile,
    unseen_starts,
)
from functions.domain.spend import VastCharges
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
        VastCharges(),
        now=NOW,
        settings=SETTINGS,
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


def test_failed_vast_list_applies_no_instance_rule_but_renews_due_credentials() -> None:
    """The host's heartbeats say it is alive: a Vast outage must not let its credentials lapse
    (they would stop its job's supervision, and so its lease)."""
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), None)
    assert d.verdict.health == "healthy" and d.transition is None and d.renew_credentials


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


def test_the_budget_is_judged_in_every_renting_state() -> None:
    """A replacement stuck while the old host bills is stopped like a running job: the stop
    takes precedence over the provision or replace the job is in the middle of."""
    old = gen(is_current=False, created_at=NOW - 30 * 3600)  # $0.50/h for 30 h: $15 of $10
    for state in (JobState.REPLACING, JobState.PROVISIONING, JobState.PENDING):
        d = decide(JobSnapshot(job=job(state), generations=(old,)), running())
        assert d.verdict.health == "over_budget" and d.transition.action == "stop", state
        assert stop_reason_for(d.transition.reason) == "over_budget"
        assert f"job {state.value}" in d.transition.reason
    fine = decide(JobSnapshot(job=job(JobState.REPLACING), generations=(gen(is_current=False),)),
                  running())  # fmt: skip
    assert fine.verdict is None and fine.transition.action == "replace"  # the one under way


def test_spend_never_goes_below_what_is_stored() -> None:
    d = decide(JobSnapshot(job=job(spent_usd=7.5), generations=(gen(),)), running())
    assert d.spend_usd == 7.5


def test_a_replace_records_its_cause_and_the_caps_count_replaced_generations() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), running("offline"))
    assert d.replaced_for == "dead"
    history = tuple(
        gen(n, is_current=False, replaced_for="dead", instance_id=90 + n) for n in range(1, 6)
    )
    capped = decide(
        JobSnapshot(job=job(generation=6), generations=(*history, gen(6, instance_id=100))),
        running("offline"),
    )
    assert capped.verdict.health == Health.FAILED and capped.verdict.cause == Health.DEAD
    assert capped.transition.action == "stop" and capped.replaced_for is None
    assert capped.blame is not None and capped.blame.kind == "dead"


def test_a_replaced_generations_status_clock_is_kept_while_its_instance_lives() -> None:
    old = gen(is_current=False, observed_status="running", observed_status_since=NOW - 600)
    facts = running("stopped")
    d = decide(JobSnapshot(job=job(JobState.REPLACING), generations=(old,)), facts)
    ((changed),) = d.clocks
    assert changed.generation == 1
    assert (changed.clock.observed_status, changed.clock.observed_status_since) == ("stopped", NOW)
    ended = old.model_copy(update={"ended_at": NOW - 60})
    assert (
        decide(JobSnapshot(job=job(JobState.REPLACING), generations=(ended,)), facts).clocks == ()
    )


def test_a_stopped_stretch_that_ends_is_added_to_the_stopped_seconds() -> None:
    current = gen(observed_status="stopped", observed_status_since=NOW - 900, stopped_s=100)
    d = decide(JobSnapshot(job=job(), generations=(current,)), running("running"))
    assert d.observation.stopped_s == 1000
    assert (d.observation.observed_status, d.observation.observed_status_since) == ("running", NOW)


def test_instances_no_generation_records_are_sighted_and_counted() -> None:
    stray = InstanceFacts(
        id=555, label="tether:t-0123abcd:g1", actual_status="running",
        start_date=NOW - 3600, usd_per_hour=0.5,
    )  # fmt: skip
    seen_before = UnrecordedInstance(instance_id=556, start=NOW - 7200, last_seen=NOW - 3600,
                                     usd_per_hour=1.0)  # fmt: skip
    charges = VastCharges(
        amounts={557: 0.25, 100: 0.0},
        labels={557: "tether:t-0123abcd:g2", 558: "tether:other-0123abcd:g1"},
    )
    snapshot = JobSnapshot(
        job=job(unrecorded_instances={"556": seen_before}), generations=(gen(created_at=NOW),)
    )
    plan = reconcile([snapshot], [*running(), stray], charges, now=NOW, settings=SETTINGS)
    (d,) = plan.decisions
    (sighting,) = d.sightings
    assert (sighting.instance_id, sighting.start, sighting.last_seen) == (555, NOW - 3600, NOW)
    # the stray's hour at $0.50, the one seen before (an hour at $1), the lost race's charge
    assert d.spend_usd == pytest.approx(0.5 + 1.0 + 0.25)


def test_an_instance_without_a_start_date_ages_from_its_first_sighting() -> None:
    orphan = InstanceFacts(id=5, label="tether:gone-0123abcd:g1", start_date=None)
    assert unseen_starts([orphan], {}) == (5,)
    assert unseen_starts([orphan], {5: NOW}) == ()
    assert find_orphans([], [orphan], now=NOW, settings=SETTINGS) == []
    assert find_orphans([], [orphan], now=NOW, settings=SETTINGS, first_seen={5: NOW - 59}) == []
    (found,) = find_orphans([], [orphan], now=NOW, settings=SETTINGS, first_seen={5: NOW - 60})
    assert found.instance_id == 5


def _silent_job(n: int, beat_age: float) -> tuple[JobSnapshot, InstanceFacts]:
    job_id = f"j{n}-0123abcd"
    snapshot = JobSnapshot(
        job=job().model_copy(update={"job_id": job_id}),
        generations=(gen(instance_id=100 + n, beat_age=beat_age, machine_id=n).model_copy(
            update={"job_id": job_id}),),
    )  # fmt: skip
    facts = InstanceFacts(
        id=100 + n, label=f"tether:{job_id}:g1", actual_status="running", start_date=NOW - 600
    )
    return snapshot, facts


@pytest.mark.parametrize(
    ("ages", "held"),
    [
        ([200, 200, 200], 3),  # three dead together, every host running: ours
        ([200, 200, 10, 10], 0),  # two: they may really be dead
        ([200, 200, 120, 10], 2),  # the third is silent, not yet dead: held with the others
        ([200, 200, 200, 10, 10, 10, 10], 0),  # three of seven: under half
    ],
)
def test_dead_verdicts_of_jobs_silent_together_are_held(ages: list[float], held: int) -> None:
    pairs = [_silent_job(n, age) for n, age in enumerate(ages)]
    plan = reconcile(
        [p[0] for p in pairs], [p[1] for p in pairs], VastCharges(), now=NOW, settings=SETTINGS
    )
    assert plan.held == held
    dead = [d for d in plan.decisions if d.verdict and d.verdict.health == Health.DEAD]
    assert sum(d.held for d in dead) == held
    for d in dead:
        started = d.transition is not None
        assert started is not d.held and (d.blame is not None) is not d.held


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


def test_a_healthy_generation_judged_overpriced_is_replaced_without_blame() -> None:
    snapshot = JobSnapshot(job=job(), generations=(gen(),))
    move = MoveCheck(move=True, reason="staying $2.95; offer 1 for $2.20: moving saves 25%")
    d: Any = decide_job(snapshot, {100: running()[0]}, VastCharges(), now=NOW,
                        settings=SETTINGS, move=move)  # fmt: skip
    assert d.verdict.health is Health.OVERPRICED and d.verdict.action == "replace"
    assert d.transition.action == "replace" and d.transition.generation == 2
    assert d.transition.reason == f"overpriced: {move.reason}"
    assert d.replaced_for == "overpriced" and d.blame is None
    assert reason_health(d.transition.reason) is Health.OVERPRICED
    assert d.observation.move_checked_at == NOW  # judged: not asked again


def test_a_judgement_to_stay_marks_the_generation_judged_and_changes_nothing_else() -> None:
    snapshot = JobSnapshot(job=job(), generations=(gen(),))
    stay = MoveCheck(move=False, reason="no cheaper, staying")
    d: Any = decide_job(snapshot, {100: running()[0]}, VastCharges(), now=NOW,
                        settings=SETTINGS, move=stay)  # fmt: skip
    assert d.verdict.health is Health.HEALTHY and d.transition is None
    assert d.observation.move_checked_at == NOW


def test_a_move_judged_for_a_host_that_died_meanwhile_is_a_dead_verdict() -> None:
    snapshot = JobSnapshot(job=job(), generations=(gen(),))
    move = MoveCheck(move=True, reason="moving saves 25%")
    d: Any = decide_job(snapshot, {100: running("offline")[0]}, VastCharges(), now=NOW,
                        settings=SETTINGS, move=move)  # fmt: skip
    assert d.verdict.health is Health.DEAD and d.blame is not None
    assert d.observation.move_checked_at is None  # not judged as a move: a later host may be
