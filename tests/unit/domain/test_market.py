"""Interruptible (bid) hosts in the planner, on hand-computed cases (functions/domain/market.py).

The common case: a 2 h job with 5.5 min of fixed start-up and a 30 GB download at 8000 Mbit/s
(0.5 min), so start-up is 6 min and the job is 2.1 h on a host; checkpoints every 30 min; the
download costs $0.60 ($0.02/GB). The host: $0.40/h on demand, `min_bid` $0.20/h, free storage,
uptime 0.8 (λ = 0.25 failures per hour: 0.525 expected restarts). Margin 10 %: bid $0.22/h.

    on demand:     0.8 + 0.04 + 0.6 + 0.525 × (0.04 + 0.6 + 0.4 × 0.25)   = 1.8285
    interruptible: 0.44 + 0.022 + 0.6 + (0.525 + 2.1 h) × (0.022 + 0.6 + 0.22 × 0.25)
                 = 1.062 + (0.525 + 2.1 h) × 0.677 = 1.417425 + 1.4217 h

so interruptible wins below h ≈ 0.289 per hour and loses above.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from functions.domain import cost, market
from functions.domain.cost import NoQualifyingOffer, cost_offer, plan_job
from functions.domain.jobspec import JobSpec, parse_job
from functions.domain.market import Bid, OutbidHazard, job_hazard, learned_hazard
from functions.domain.offer import Offer
from functions.domain.rent import RentPlan, plan_rent
from tests.unit.domain.builders import NOW, job

ON_DEMAND_TOTAL = 1.8285


def market_spec(**resources: Any) -> dict[str, Any]:
    """The job spec these tests price (and `tether plan`'s market tests write to a file)."""
    return {
        "name": "market-test",
        "image": "pytorch/pytorch:latest",
        "run": "python train.py",
        "expected_hours": 2,
        "expected_startup_min": 5.5,
        "budget_usd": 100,
        "resources": {"min_disk_gb": 40, "min_reliability": 0, "min_download_mbps": 0, **resources},
        "data": {"download_gb": 30, "upload_gb_per_checkpoint": 0},
        "checkpoint": {"interval_min": 30},
    }


def make_job(**resources: Any) -> JobSpec:
    return parse_job(market_spec(**resources))


def offer_record(offer_id: int, **fields: Any) -> dict[str, Any]:
    """A Vast offer record (a 4090 at $0.40/h, min_bid $0.20) as the API returns it."""
    record: dict[str, Any] = {
        "id": offer_id,
        "machine_id": offer_id + 10_000,
        "gpu_name": "RTX 4090",
        "num_gpus": 1,
        "gpu_ram": 24564,
        "disk_space": 500,
        "dph_base": 0.40,
        "min_bid": 0.20,
        "storage_cost": 0,
        "inet_down": 8000,
        "inet_up": 8000,
        "inet_down_cost": 0.02,
        "inet_up_cost": 0,
        "reliability2": 0.8,
        "rentable": True,
        "rented": False,
    }
    return record | fields


def make_offer(offer_id: int, **fields: Any) -> Offer:
    return Offer.model_validate(offer_record(offer_id, **fields))


def interruptible_total(hazard: float) -> float:
    return 1.417425 + 1.4217 * hazard


def hazard(per_hour: float) -> OutbidHazard:
    return OutbidHazard(per_hour=per_hour, source="spec", detail="test")


# --- pricing one offer -------------------------------------------------------------------------


def test_an_interruptible_offer_is_priced_at_the_bid_with_outbids_as_restarts():
    job = make_job(market="interruptible", outbid_hazard_per_hour=0.1)
    c = plan_job(job, [make_offer(1)]).ranking[0]

    assert c.market == "interruptible"
    assert c.bid_usd_per_hour == pytest.approx(0.22)
    assert c.usd_per_hour == pytest.approx(0.22)
    assert c.expected_restarts == pytest.approx(0.525)
    assert c.expected_outbids == pytest.approx(0.21)
    b = c.breakdown
    assert b.compute_usd == pytest.approx(0.44)
    assert b.startup_usd == pytest.approx(0.022)
    assert b.download_usd == pytest.approx(0.6)
    assert b.interruption_usd == pytest.approx(0.525 * 0.677)
    assert b.outbid_usd == pytest.approx(0.21 * 0.677)
    assert c.expected_total_usd == pytest.approx(interruptible_total(0.1))  # 1.559595
    assert c.hazard is not None and c.hazard.per_hour == 0.1 and c.hazard.source == "spec"


def test_on_demand_is_priced_as_before_and_carries_no_bid():
    c = plan_job(make_job(), [make_offer(1)]).ranking[0]
    assert c.market == "on-demand"
    assert c.bid_usd_per_hour is None and c.hazard is None and c.bid is None
    assert c.expected_outbids == 0 and c.breakdown.outbid_usd == 0
    assert c.expected_total_usd == pytest.approx(ON_DEMAND_TOTAL)


def test_the_bid_pays_storage_on_top():
    # 0.3 $/GB/month × 72 GB / 720 h = 0.03 $/h, on the bid as on the on-demand price.
    job = make_job(market="interruptible", min_disk_gb=72)
    c = plan_job(job, [make_offer(1, storage_cost=0.3)]).ranking[0]
    assert c.bid_usd_per_hour == pytest.approx(0.22)
    assert c.usd_per_hour == pytest.approx(0.25)


@pytest.mark.parametrize(("margin", "bid"), [(0, 0.2), (0.1, 0.22), (0.5, 0.3), (2, 0.6)])
def test_the_bid_is_min_bid_plus_the_margin(margin, bid):
    job = make_job(market="interruptible", bid_margin=margin)
    assert plan_job(job, [make_offer(1)]).ranking[0].bid_usd_per_hour == pytest.approx(bid)


def test_interruptible_wins_at_a_low_hazard_and_loses_at_a_high_one():
    offer = make_offer(1)
    low = plan_job(make_job(market="interruptible", outbid_hazard_per_hour=0.1), [offer])
    high = plan_job(make_job(market="interruptible", outbid_hazard_per_hour=0.5), [offer])
    assert low.ranking[0].expected_total_usd == pytest.approx(1.559595)
    assert low.ranking[0].expected_total_usd < ON_DEMAND_TOTAL
    assert high.ranking[0].expected_total_usd == pytest.approx(2.128275)
    assert high.ranking[0].expected_total_usd > ON_DEMAND_TOTAL


@pytest.mark.parametrize(
    ("rate", "winner", "other"),
    [(0.1, "interruptible", ON_DEMAND_TOTAL), (0.5, "on-demand", 2.128275)],
)
def test_auto_keeps_the_cheaper_market_per_offer(rate, winner, other):
    job = make_job(market="auto", outbid_hazard_per_hour=rate)
    c = plan_job(job, [make_offer(1)]).ranking[0]
    assert c.market == winner
    assert c.expected_total_usd == pytest.approx(min(ON_DEMAND_TOTAL, interruptible_total(rate)))
    assert c.other_market_total_usd == pytest.approx(other)
    assert (c.bid_usd_per_hour is not None) is (winner == "interruptible")


def test_auto_ranks_a_mix_of_markets():
    # Offer 2 has no min_bid: on demand only. Offer 3's floor is dearer than its on-demand price.
    job = make_job(market="auto", outbid_hazard_per_hour=0.1)
    offers = [make_offer(1), make_offer(2, min_bid=None), make_offer(3, min_bid=0.5)]
    plan = plan_job(job, offers)
    assert [(c.offer.id, c.market) for c in plan.ranking] == [
        (1, "interruptible"),
        (2, "on-demand"),
        (3, "on-demand"),
    ]
    assert plan.ranking[1].other_market_total_usd is None  # no other market to compare with
    assert plan.ranking[2].other_market_total_usd is not None
    assert plan.ranking[2].other_market_total_usd > plan.ranking[2].expected_total_usd


# --- which offers qualify ----------------------------------------------------------------------


@pytest.mark.parametrize("min_bid", [None, 0, -0.1, "n/a"])
def test_an_offer_without_a_min_bid_is_excluded_under_resources_market(min_bid):
    job = make_job(market="interruptible")
    plan = plan_job(job, [make_offer(1, min_bid=min_bid), make_offer(2)])
    assert [c.offer.id for c in plan.ranking] == [2]
    with pytest.raises(NoQualifyingOffer) as err:
        plan_job(job, [make_offer(1, min_bid=min_bid)])
    assert err.value.excluded == {"resources.market": 1}


def test_max_usd_per_hour_applies_to_the_price_paid():
    offer = make_offer(1)  # $0.40/h on demand, $0.22/h as a bid
    with pytest.raises(NoQualifyingOffer) as err:
        plan_job(make_job(max_usd_per_hour=0.3), [offer])
    assert err.value.excluded == {"resources.max_usd_per_hour": 1}
    c = plan_job(make_job(market="interruptible", max_usd_per_hour=0.3), [offer]).ranking[0]
    assert c.market == "interruptible"
    # auto at a hazard where on demand would win: on demand is over the cap, so the bid it is.
    auto = plan_job(
        make_job(market="auto", max_usd_per_hour=0.3, outbid_hazard_per_hour=0.5), [offer]
    ).ranking[0]
    assert auto.market == "interruptible" and auto.other_market_total_usd is None
    # A bid over the cap is refused too: 0.20 × 1.5 = 0.30 > 0.29.
    with pytest.raises(NoQualifyingOffer) as err:
        plan_job(make_job(market="interruptible", bid_margin=0.5, max_usd_per_hour=0.29), [offer])
    assert err.value.excluded == {"resources.max_usd_per_hour": 1}


def test_auto_counts_every_reason_once_when_neither_market_qualifies():
    job = make_job(market="auto", max_usd_per_hour=0.3, gpu_names=["RTX 3090"])
    with pytest.raises(NoQualifyingOffer) as err:
        plan_job(job, [make_offer(1, min_bid=None)])
    assert err.value.excluded == {
        "resources.gpu_names": 1,
        "resources.market": 1,
        "resources.max_usd_per_hour": 1,
    }


# --- checkpoint interval -----------------------------------------------------------------------


def test_the_interval_uses_the_combined_mtbf_of_failures_and_outbids():
    # λ 0.25 + h 0.25 → MTBF 2 h; checkpoint cost 1 min (nothing to upload):
    # sqrt(2 × 1 × 120) = 15.49 min, under the cap (6 min + 0.6 / 0.22 h of start-up).
    job = parse_job(
        {**make_job(market="interruptible", outbid_hazard_per_hour=0.25).model_dump(),
         "checkpoint": {"interval_min": None}}
    )  # fmt: skip
    offer = make_offer(1)
    plan = plan_job(job, [offer])
    assert plan.checkpoint_interval_min == pytest.approx(math.sqrt(240))
    assert plan.ranking[0].checkpoint_interval_min == pytest.approx(math.sqrt(240))
    # The same offer on demand: MTBF 4 h.
    assert cost.recommend_checkpoint_interval(job, offer) == pytest.approx(math.sqrt(480))
    assert cost.mtbf_hours(offer, 0.25) == pytest.approx(2)


def test_the_interval_cap_uses_the_bid_price():
    # Cap = start-up $ + download $ over the price: 6 min + 0.6 / q h. Without a download and
    # with a long Young/Daly (reliable host, no hazard) the cap is the start-up alone.
    job = make_job(market="interruptible", outbid_hazard_per_hour=0)
    offer = make_offer(1, reliability2=0.9999)
    bid = Bid(usd_per_hour=0.22, hazard=hazard(0))
    unset = job.model_copy(
        update={"checkpoint": job.checkpoint.model_copy(update={"interval_min": None})}
    )
    assert cost.recommend_checkpoint_interval(unset, offer, bid=bid) == pytest.approx(
        6 + 0.6 / 0.22 * 60
    )
    assert cost.recommend_checkpoint_interval(unset, offer) == pytest.approx(6 + 0.6 / 0.4 * 60)


def test_cost_offer_with_a_bid_matches_the_plan():
    job = make_job(market="interruptible")
    offer = make_offer(1)
    direct = cost_offer(job, offer, bid=Bid(usd_per_hour=0.22, hazard=hazard(0.1)))
    assert direct.expected_total_usd == pytest.approx(interruptible_total(0.1))


# --- the hazard --------------------------------------------------------------------------------


def test_the_spec_hazard_is_used_until_outbids_are_measured():
    job = make_job(market="interruptible", outbid_hazard_per_hour=0.2)
    plan = plan_job(job, [make_offer(1)])
    assert plan.hazard is not None
    assert plan.hazard.per_hour == 0.2 and plan.hazard.source == "spec"
    assert "from resources.outbid_hazard_per_hour" in plan.hazard.detail
    assert job_hazard(job) == plan.hazard
    assert plan_job(make_job(), [make_offer(1)]).hazard is None  # on demand: no hazard


@pytest.mark.parametrize(
    ("prior", "outbids", "hours", "rate"),
    [
        (0.1, 3, 2.0, 4 / 12),  # (0.1 × 10 + 3) / (10 + 2)
        (0.1, 0, 30.0, 1 / 40),  # no outbids in 30 h: the rate falls
        (0.1, 1, 0.0, 2 / 10),  # an outbid at once: the prior tempers it
        (0.0, 2, 10.0, 2 / 20),  # a zero prior still learns
        (0.5, 10, 1000.0, 15 / 1010),  # a long record dominates the prior
    ],
)
def test_the_learned_hazard_is_the_gamma_poisson_posterior_mean(prior, outbids, hours, rate):
    learned = learned_hazard(prior, outbids, hours)
    assert learned.per_hour == pytest.approx(rate)
    assert learned.source == "learned"
    assert (learned.outbids, learned.hours) == (outbids, hours)
    assert f"{outbids} outbid" in learned.detail


def test_nothing_observed_is_the_prior():
    h = learned_hazard(0.1, 0, 0.0)
    assert h.per_hour == 0.1 and h.source == "spec"


def test_the_prior_weight_is_a_parameter():
    assert learned_hazard(0.1, 3, 2.0, prior_hours=2).per_hour == pytest.approx((0.2 + 3) / 4)


@pytest.mark.parametrize(
    ("prior", "outbids", "hours", "prior_hours"),
    [
        (-0.1, 0, 1.0, 10),
        (0.1, -1, 1.0, 10),
        (0.1, 0, -1.0, 10),
        (0.1, 0, 1.0, 0),
        (0.1, 0, math.inf, 10),
        (math.nan, 0, 1.0, 10),
        (0.1, True, 1.0, 10),
    ],
)
def test_impossible_hazard_inputs_are_refused(prior, outbids, hours, prior_hours):
    with pytest.raises(ValueError):
        learned_hazard(prior, outbids, hours, prior_hours=prior_hours)


def test_a_learned_hazard_changes_the_plan():
    # The spec says 0.1/h (interruptible wins); the job was outbid 6 times in 4 h:
    # (1 + 6) / 14 = 0.5/h, where on demand wins.
    job = make_job(market="auto", outbid_hazard_per_hour=0.1)
    learned = job_hazard(job, outbids=6, hours=4.0)
    assert learned.per_hour == pytest.approx(0.5)
    assert plan_job(job, [make_offer(1)]).ranking[0].market == "interruptible"
    c = plan_job(job, [make_offer(1)], hazard=learned).ranking[0]
    assert c.market == "on-demand"
    assert c.other_market_total_usd == pytest.approx(interruptible_total(0.5))


def test_min_bid_is_read_from_text_like_other_prices():
    assert make_offer(1, min_bid="0.25").min_bid == 0.25
    assert market.bid_usd_per_hour(make_offer(1, min_bid="0.25"), 0.2) == pytest.approx(0.3)
    assert market.bid_usd_per_hour(make_offer(1, min_bid=None), 0.2) is None


# --- the rent plan carries the bid -------------------------------------------------------------


def test_the_rent_plan_carries_the_bid_of_an_interruptible_choice():
    base = job()
    resources = base.spec.resources.model_copy(update={"market": "auto", "min_reliability": 0})
    auto_job = base.model_copy(
        update={"spec": base.spec.model_copy(update={"resources": resources})}
    )
    offers = [make_offer(1), make_offer(2, min_bid=None, dph_base=0.5)]
    rent = plan_rent(auto_job, offers, generation=1, generations=(), reputations={}, now=NOW)
    assert isinstance(rent, RentPlan)
    first, second = rent.candidates
    assert first.offer.id == 1 and first.bid_usd_per_hour == pytest.approx(0.22)
    assert second.offer.id == 2 and second.bid_usd_per_hour is None
