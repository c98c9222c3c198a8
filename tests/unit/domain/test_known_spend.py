"""The job's spend as last measured: the monitor writes it every run with the current
generation's observation and onto the job item only in steps (`functions/domain/spend.py`), so
every reader takes the larger (`functions.domain.job.known_spend_usd`)."""

from __future__ import annotations

import pytest

from functions.domain.job import known_spend_usd, with_known_spend
from functions.domain.reconcile import (
    InstanceFacts,
    JobDecision,
    JobSnapshot,
    SupervisionSettings,
    reconcile,
)
from functions.domain.spend import VastCharges, job_item_spend_due, job_item_spend_step_usd
from tests.unit.domain.builders import NOW, gen, job


def test_the_known_spend_is_the_larger_of_the_job_item_and_the_generations() -> None:
    assert known_spend_usd(job(spent_usd=2.0), ()) == 2.0
    assert known_spend_usd(job(spent_usd=2.0), (gen(1, job_spent_usd=2.5),)) == 2.5
    older = (gen(1, job_spent_usd=1.0), gen(2, job_spent_usd=3.0))
    assert known_spend_usd(job(spent_usd=2.0), older) == 3.0  # a replaced one's figure counts
    assert known_spend_usd(job(spent_usd=2.0), (gen(1, job_spent_usd=1.5),)) == 2.0
    fresh = with_known_spend(job(spent_usd=9.0), (gen(1, job_spent_usd=9.6),))
    assert fresh.spent_usd == 9.6 and fresh.remaining_budget_usd == pytest.approx(0.4)
    same = job(spent_usd=9.0)
    assert with_known_spend(same, ()) is same


def test_the_step_is_one_percent_of_the_budget_and_at_least_a_cent() -> None:
    assert job_item_spend_step_usd(50.0) == pytest.approx(0.5)
    assert job_item_spend_step_usd(0.2) == 0.01


@pytest.mark.parametrize(
    ("case", "stored", "spend", "carried", "transition", "due"),
    [
        ("running, moved less than a step ($0.10 of $10)", 1.0, 1.099, True, False, False),
        ("running, moved a step", 1.0, 1.1, True, False, True),
        ("not moved", 1.0, 1.0, True, True, False),
        ("never downwards, even at a transition", 1.0, 0.5, False, True, False),
        ("a transition named (stop, over budget, replace)", 1.0, 1.001, True, True, True),
        ("no generation write carries it (nothing rented now)", 1.0, 1.001, False, False, True),
    ],
)
def test_the_job_item_spend_is_written_only_at_a_step_a_transition_or_without_a_carrier(
    case: str, stored: float, spend: float, carried: bool, transition: bool, due: bool
) -> None:
    assert job_item_spend_due(stored, spend, 10.0, carried=carried, transition=transition) is due, (
        case
    )


def decide(snapshot: JobSnapshot) -> JobDecision:
    instances = [
        InstanceFacts(
            id=100, label="tether:t-0123abcd:g1", actual_status="running", start_date=NOW - 600
        )
    ]
    settings = SupervisionSettings(interval_s=60, orphan_grace_s=60)
    return reconcile([snapshot], instances, VastCharges(), now=NOW, settings=settings).decisions[0]


def test_the_observation_carries_the_jobs_spend_and_it_never_moves_down() -> None:
    """The job item lags by up to a step: the generation's figure is the floor now."""
    measured = decide(JobSnapshot(job=job(), generations=(gen(),)))
    assert measured.observation is not None
    assert measured.observation.job_spent_usd == measured.spend_usd > 0
    ahead = gen(job_spent_usd=7.5)  # an earlier run saw Vast's charges; this one cannot
    d = decide(JobSnapshot(job=job(spent_usd=1.0), generations=(ahead,)))
    assert d.observation is not None
    assert d.spend_usd == d.observation.job_spent_usd == 7.5


def test_over_budget_is_judged_on_the_generations_figure_when_the_job_item_lags() -> None:
    lagging = JobSnapshot(job=job(spent_usd=1.0), generations=(gen(job_spent_usd=9.999),))
    d = decide(lagging)
    assert d.verdict is not None and d.transition is not None
    assert (d.verdict.health, d.transition.action) == ("over_budget", "stop")
