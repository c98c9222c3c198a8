"""The lifecycle's pure rent decision (functions/domain/rent.py): which offers to try, in which
order, with which lease, or why not to rent now; and the back-off while waiting for capacity."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.job import HostReputation
from functions.domain.offer import Offer
from functions.domain.rent import (
    Refusal,
    RentPlan,
    blocklist,
    capacity_attempt,
    capacity_wait_s,
    plan_rent,
)
from tests.unit.domain.builders import NOW, gen, job

DAY = 86_400.0  # the blame half-life, spelled out (functions/domain/blame.py)


def offer(offer_id: int, usd_per_hour: float, **fields: Any) -> Offer:
    """A qualifying offer for the builders' job (1 GPU, 40 GB disk, reliable, fast), machine
    id = offer id × 10, priced `usd_per_hour` all in."""
    values: dict[str, Any] = {
        "id": offer_id, "machine_id": offer_id * 10, "gpu_name": "RTX 4090", "num_gpus": 1,
        "gpu_ram": 24_000, "disk_space": 100, "dph_base": usd_per_hour, "storage_cost": 0,
        "inet_down": 500, "inet_up": 500, "reliability2": 0.99, "rentable": True,
    }  # fmt: skip
    values.update(fields)
    return Offer.model_validate(values)


MARKET = [offer(1, 0.5), offer(2, 0.3), offer(3, 0.4)]


def plan(offers: list[Offer] = MARKET, **kwargs: Any) -> RentPlan | Refusal:
    values: dict[str, Any] = {
        "generation": 2, "generations": (), "reputations": {}, "now": NOW, "max_offers": 5
    }  # fmt: skip
    values.update(kwargs)
    the_job = values.pop("job", job())
    return plan_rent(the_job, offers, **values)


@pytest.mark.parametrize(
    ("case", "kwargs", "tried"),
    [
        ("cheapest expected total first", {}, [2, 3, 1]),
        ("at most max_offers per attempt", {"max_offers": 2}, [2, 3]),
        (
            "a host this job died or hung on is skipped",
            {"generations": (gen(1, machine_id=20, host_blamed=True),)},
            [3, 1],
        ),
        (
            "a host replaced for another cause is not",
            {"generations": (gen(1, machine_id=20, host_blamed=False),)},
            [2, 3, 1],
        ),
        (
            "a host blamed by two jobs now is skipped; one blamed by one job is not",
            {
                "reputations": {
                    20: HostReputation(machine_id=20, blame=2.0, blame_at=NOW),
                    30: HostReputation(machine_id=30, blame=1.0, blame_at=NOW),
                }
            },
            [3, 1],
        ),
        (
            "a host whose blame has decayed is tried again",
            {"reputations": {20: HostReputation(machine_id=20, blame=3.0, blame_at=NOW - 2 * DAY)}},
            [2, 3, 1],
        ),
    ],
)
def test_the_plan_tries_qualifying_offers_in_order(
    case: str, kwargs: dict[str, Any], tried: list[int]
) -> None:
    decided = plan(**kwargs)
    assert isinstance(decided, RentPlan), case
    assert [c.offer.id for c in decided.candidates] == tried, case


@pytest.mark.parametrize(
    ("case", "offers", "kwargs", "outcome", "reason"),
    [
        ("no offers", [], {}, "no_capacity", "no offer qualifies: no offers to consider"),
        (
            "every offer on a blocked host",
            [offer(2, 0.3)],
            {"reputations": {20: HostReputation(machine_id=20, blame=2.0, blame_at=NOW)}},
            "no_capacity",
            "no offer qualifies: none of 1 offers qualifies; blocklist excluded the most (1 of 1)",
        ),
        (
            "a budget that cannot pay for start-up and one checkpoint",
            MARKET,
            {"job": job(spent_usd=9.99)},
            "over_budget",
            "remaining budget $0.01 does not cover start-up and one checkpoint interval on the "
            "best offer ($0.06 at $0.300/h)",
        ),
        (
            "the spend the last monitor run kept on a generation, not the job item's step",
            MARKET,
            {"job": job(spent_usd=9.5), "generations": (gen(1, job_spent_usd=9.99),)},
            "over_budget",
            "remaining budget $0.01 does not cover start-up and one checkpoint interval on the "
            "best offer ($0.06 at $0.300/h)",
        ),
    ],
)
def test_the_plan_is_refused_with_its_reason(
    case: str, offers: list[Offer], kwargs: dict[str, Any], outcome: str, reason: str
) -> None:
    assert plan(offers, **kwargs) == Refusal(outcome=outcome, reason=reason), case


def test_each_candidate_carries_its_prices_label_and_lease() -> None:
    decided = plan(job=job(spent_usd=9.0))  # $1 left
    assert isinstance(decided, RentPlan)
    assert (decided.job_id, decided.generation, decided.label) == (
        "t-0123abcd",
        2,
        "tether.2:t-0123abcd:g2",  # the slot: a hash of the job id
    )
    assert decided.disk_gb == 40
    best = decided.candidates[0]
    assert best.prices.usd_per_hour == pytest.approx(0.3)
    # min(3 h window, $1 / $0.30 per hour = 3.33 h) → the window
    assert best.lease_expires_at == NOW + 3 * 3600
    slowest = decided.candidates[-1]  # $0.50/h: $1 lasts 2 h, less than the window
    assert slowest.lease_expires_at == pytest.approx(NOW + 2 * 3600)
    assert best.expected_total_usd < slowest.expected_total_usd


def test_capacity_backoff_doubles_to_ten_minutes_and_inverts() -> None:
    assert [capacity_wait_s(a) for a in range(1, 7)] == [60, 120, 240, 480, 600, 600]
    assert capacity_attempt(0) == 1 and capacity_attempt(180) == 3 and capacity_attempt(179) == 2


def test_blocklist_holds_this_jobs_blamed_machines_and_hosts_still_avoided_by_all() -> None:
    generations = [gen(1, machine_id=1, host_blamed=True), gen(2, machine_id=2)]
    reputations = {
        3: HostReputation(machine_id=3, blame=1.5, blame_at=NOW),  # at the threshold
        4: HostReputation(machine_id=4, blame=1.49, blame_at=NOW),  # just under it
        5: HostReputation(machine_id=5, blame=3.0, blame_at=NOW - DAY),  # 1.5 after a day
        6: HostReputation(machine_id=6, blame=3.0, blame_at=NOW - DAY - 60),  # just under
    }
    assert blocklist(generations, reputations, now=NOW) == {1, 3, 5}


def test_a_replacement_prices_the_steps_left_by_the_scripts_total_when_the_spec_has_none() -> None:
    # The spec gives no total_steps; the script reported 1,000 in its heartbeats. Generation 1
    # trained 500 steps in 30 min on machine 10 (offer 1): a replacement there is priced at that
    # pace for the 500 steps after the checkpoint, not at the spec's hours.
    from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
    from functions.domain.job import Heartbeat

    beat = Heartbeat(
        at=NOW, agent_time=NOW, phase="training", step=500, total_steps=1000,
        gpu=GpuProbe(available=True, utilization_pct=90.0),
    )  # fmt: skip
    first = gen(
        1, machine_id=10, heartbeat=beat, gpu_name="RTX 4090", gpu_count=1,
        training_started_at=NOW - 1800, training_start_step=0, is_current=False,
    )  # fmt: skip
    checkpoint = CheckpointRef(step=500, generation=1, manifest_key="t/g1/ckpt-500/manifest.json")
    result = plan([offer(1, 0.5)], generations=(first,), job=job(recorded_checkpoints=[checkpoint]))
    assert isinstance(result, RentPlan)
    speed = result.candidates[0].speed
    assert speed is not None and speed.source == "measured"
    assert speed.hours == pytest.approx(0.5)  # 500 steps left at 1,000 steps/h
