"""Rules of the monitor's decision for one job (functions/domain/reconcile.py::decide_job and
supervision_facts.observe) that a bug could break unseen: who is blamed, what price the
budget is judged at, which charge counts, which clocks are carried, where the progress clock
starts. Each test names its expected values; none is derived from the code under test."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.health import Health
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Heartbeat
from functions.domain.reconcile import InstanceFacts, JobSnapshot, SupervisionSettings, reconcile
from functions.domain.spend import VastCharges
from functions.domain.supervision_facts import observe
from tests.unit.domain.builders import NOW, gen, job

SETTINGS = SupervisionSettings(interval_s=60, orphan_grace_s=60)
LABEL = "tether:t-0123abcd:g1"


def listed(status: str = "running", **fields: Any) -> InstanceFacts:
    values: dict[str, Any] = {"id": 100, "label": LABEL, "actual_status": status}
    return InstanceFacts(**({"start_date": NOW - 600} | values | fields))


def decide(
    snapshot: JobSnapshot,
    instances: list[InstanceFacts],
    charges: VastCharges | None = None,
    first_seen: dict[int, float] | None = None,
) -> Any:
    plan = reconcile(  # no charges given: read, and none
        [snapshot],
        instances,
        charges or VastCharges(),
        now=NOW,
        settings=SETTINGS,
        first_seen=first_seen,
    )
    return plan.decisions[0]


def beat(
    *, step: int = 3, phase: str = "training", util: float = 90.0, exit_code: int | None = None
) -> Heartbeat:
    return Heartbeat(
        at=NOW - 10, agent_time=NOW, phase=phase, step=step, exit_code=exit_code,
        gpu=GpuProbe(available=True, utilization_pct=util),
    )  # fmt: skip


# -- blame ------------------------------------------------------------------------------------


def test_a_crash_with_restarts_left_replaces_and_blames_no_host() -> None:
    current = gen(heartbeat=beat(phase="failed", exit_code=1))
    d = decide(JobSnapshot(job=job(), generations=(current,)), [listed()])
    assert d.verdict.health == Health.CRASHED and d.transition.action == "replace"
    assert d.blame is None


def test_a_hung_host_is_blamed_as_hung() -> None:
    current = gen(
        heartbeat=beat(util=0.0),
        training_started_at=NOW - 3600,
        progress_step=3,
        progress_at=NOW - 3600,
    )
    d = decide(JobSnapshot(job=job(), generations=(current,)), [listed()])
    assert d.verdict.health == Health.HUNG
    assert (d.blame.machine_id, d.blame.failure, d.blame.kind) == (7, "t-0123abcd:g1", "hung")


# -- the budget's price -----------------------------------------------------------------------


@pytest.mark.parametrize(("stray_usd_per_hour", "over"), [(None, False), (20.0, True)])
def test_an_unrecorded_instance_adds_its_price_to_the_budget_rule(
    stray_usd_per_hour: float | None, over: bool
) -> None:
    """$9.80 spent of $10: the recorded host ($0.50/h) leaves room for the next interval; a
    stray rented for the job at $20/h ($0.33 a minute) does not."""
    instances = [listed()]
    if stray_usd_per_hour is not None:
        instances.append(listed(id=555, start_date=NOW, usd_per_hour=stray_usd_per_hour))
    d = decide(JobSnapshot(job=job(spent_usd=9.8), generations=(gen(),)), instances)
    assert d.spend_usd == pytest.approx(9.8)
    assert (d.verdict.health == Health.OVER_BUDGET) is over


# -- spend ------------------------------------------------------------------------------------


def test_vasts_charge_for_the_current_host_counts_when_it_is_larger() -> None:
    """Ten minutes at $0.50/h is about $0.083 by our clock; Vast billed $2 (the image pull's
    traffic, say): $2 is the spend, for the job and on the generation."""
    charges = VastCharges(amounts={100: 2.0}, labels={100: LABEL})
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), [listed()], charges)
    assert d.spend_usd == pytest.approx(2.0)
    assert d.observation.spend_usd == pytest.approx(2.0)
    assert d.generation == 1


def test_the_generations_own_estimate_is_its_spend_without_charges() -> None:
    d = decide(JobSnapshot(job=job(), generations=(gen(),)), [listed()])
    # 600 s at $0.40/h GPU + $0.10/h storage
    assert d.observation.spend_usd == pytest.approx(0.5 * 600 / 3600)


def test_an_instance_without_a_start_date_is_billed_from_its_first_sighting() -> None:
    stray = listed(id=555, start_date=None, usd_per_hour=1.0)
    d = decide(
        JobSnapshot(job=job(), generations=(gen(created_at=NOW),)),
        [listed(), stray],
        first_seen={555: NOW - 3600},
    )
    (sighting,) = d.sightings
    assert (sighting.instance_id, sighting.start) == (555, NOW - 3600)
    assert d.spend_usd == pytest.approx(1.0)  # an hour at $1/h; the recorded host just began


# -- clocks -----------------------------------------------------------------------------------


def test_the_current_generations_clock_travels_in_its_observation_not_with_the_old_ones() -> None:
    current = gen(observed_status="running", observed_status_since=NOW - 600)
    unchanged = decide(JobSnapshot(job=job(), generations=(current,)), [listed()])
    assert unchanged.clocks == ()
    stopped = decide(JobSnapshot(job=job(), generations=(current,)), [listed("stopped")])
    assert stopped.clocks == ()
    assert (stopped.observation.observed_status, stopped.observation.observed_status_since) == (
        "stopped",
        NOW,
    )


# -- where the progress clock starts ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "health"),
    [
        # training for an hour, the step last advanced 100 s ago: slow, not hung
        ({"training_started_at": NOW - 3600, "progress_step": 3, "progress_at": NOW - 100},
         Health.HEALTHY),
        # no step ever seen, training began 100 s ago (rented an hour ago): not hung
        ({"training_started_at": NOW - 100, "created_at": NOW - 3600}, Health.HEALTHY),
        # no progress for an hour, but the GPU was busy 100 s ago: not hung
        ({"training_started_at": NOW - 3600, "progress_step": 3, "progress_at": NOW - 3600,
          "gpu_busy_at": NOW - 100}, Health.HEALTHY),
        # no progress for an hour, the GPU idle all along
        ({"training_started_at": NOW - 3600, "progress_step": 3, "progress_at": NOW - 3600},
         Health.HUNG),
    ],
)  # fmt: skip
def test_the_no_progress_rule_counts_from_the_last_advance_or_the_first_training_beat(
    fields: dict[str, Any], health: Health
) -> None:
    current = gen(heartbeat=beat(util=0.0), **fields)
    d = decide(JobSnapshot(job=job(), generations=(current,)), [listed()])
    assert d.verdict.health == health


@pytest.mark.parametrize(
    ("stored", "step", "expected"),
    [
        ((None, None), 3, (3, NOW)),  # the first step seen starts the clock
        ((2, NOW - 500), 3, (3, NOW)),  # an advance restarts it
        ((3, NOW - 500), 3, (3, NOW - 500)),  # the same step: no progress
        ((5, NOW - 500), 3, (5, NOW - 500)),  # a lower step (a restore) is not progress
        ((5, NOW - 500), None, (5, NOW - 500)),  # no heartbeat: nothing changes
    ],
)
def test_progress_moves_only_when_the_step_advances(
    stored: tuple[int | None, float | None], step: int | None, expected: tuple[int, float]
) -> None:
    heartbeat = None if step is None else beat(step=step)
    current = gen(
        heartbeat=heartbeat, progress_step=stored[0], progress_at=stored[1], spend_usd=1.5
    )
    seen = observe(current, listed(), listed=True, now=NOW)
    assert (seen.progress_step, seen.progress_at) == expected
    assert seen.spend_usd == 1.5
