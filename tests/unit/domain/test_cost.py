"""The full-cost model and planner, on hand-computed cases (functions/domain/cost.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from functions.domain import cost
from functions.domain.cost import NoQualifyingOffer, cost_offer, plan_job
from functions.domain.jobspec import JobSpec, parse_job
from functions.domain.offer import Offer


def make_job(**overrides: Any) -> JobSpec:
    """A job with every cost input explicit; `resources`, `data`, `checkpoint` merge."""
    spec: dict[str, Any] = {
        "name": "cost-test",
        "image": "pytorch/pytorch:latest",
        "run": "python train.py",
        "expected_hours": 2,
        "expected_startup_min": 6,
        "budget_usd": 100,
        "resources": {"min_disk_gb": 40, "min_reliability": 0, "min_download_mbps": 0},
        "data": {"download_gb": 20, "upload_gb_per_checkpoint": 0},
        "checkpoint": {"interval_min": 30},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return parse_job(spec)


def make_offer(offer_id: int, **fields: Any) -> Offer:
    """An offer that meets make_job()'s resources; storage is free so $/h is dph_base."""
    record: dict[str, Any] = {
        "id": offer_id,
        "machine_id": offer_id + 10_000,
        "gpu_name": "RTX 4090",
        "num_gpus": 1,
        "gpu_ram": 24564,
        "disk_space": 500,
        "dph_base": 0.30,
        "storage_cost": 0,
        "inet_down": 8000,
        "inet_up": 8000,
        "inet_down_cost": 0,
        "inet_up_cost": 0,
        # Uptime 0.8 → MTBF = 1 h × 0.8 / 0.2 = 4 h → λ = 0.25 interruptions per hour.
        "reliability2": 0.8,
        "rentable": True,
        "rented": False,
    }
    record.update(fields)
    return Offer.model_validate(record)


# --- the expected total, by hand --------------------------------------------------------------


def test_cheapest_per_hour_is_dearest_in_total_because_of_traffic():
    # 2 h job, 6 min fixed start-up, 20 GB download at 8000 Mbit/s = 20 s, checkpoints every 30 min.
    # Start-up = 6 + 1/3 = 6.3333 min; hours on host = 2.105556; restarts = 0.25 × that = 0.526389.
    job = make_job()
    by_hour = make_offer(1, dph_base=0.20, inet_down_cost=0.05)  # $1.00 of download
    balanced = make_offer(2, dph_base=0.25, inet_down_cost=0.01)  # $0.20
    full_cost = make_offer(3, dph_base=0.30, inet_down_cost=0.001)  # $0.02

    plan = plan_job(job, [by_hour, balanced, full_cost])

    assert [c.offer.id for c in plan.ranking] == [3, 2, 1]
    assert plan.naive_choice is not None and plan.naive_choice.offer.id == 1
    assert plan.considered == 3
    cheapest_per_hour = plan.ranking[-1]
    # compute 0.2 × 2 = 0.4; start-up 0.2 × 6.3333/60 = 0.021111; download 20 × 0.05 = 1.0;
    # per restart 0.021111 + 1.0 + 0.2 × 15/60 = 1.071111 → interruptions 0.563824.
    assert cheapest_per_hour.startup_min == pytest.approx(6 + 1 / 3)
    assert cheapest_per_hour.expected_restarts == pytest.approx(0.526389, rel=1e-5)
    b = cheapest_per_hour.breakdown
    assert b.compute_usd == pytest.approx(0.4)
    assert b.startup_usd == pytest.approx(0.021111, rel=1e-4)
    assert b.download_usd == pytest.approx(1.0)
    assert b.upload_usd == 0
    assert b.interruption_usd == pytest.approx(0.563824, rel=1e-4)
    assert cheapest_per_hour.expected_total_usd == pytest.approx(1.984935, rel=1e-5)
    # 0.6 + 0.031667 + 0.02 + 0.526389 × (0.031667 + 0.02 + 0.075) = 0.718343
    assert plan.ranking[0].expected_total_usd == pytest.approx(0.718343, rel=1e-5)
    # 0.5 + 0.026389 + 0.2 + 0.526389 × (0.026389 + 0.2 + 0.0625) = 0.878457
    assert plan.ranking[1].expected_total_usd == pytest.approx(0.878457, rel=1e-5)


def test_slow_download_makes_a_cheap_host_lose():
    # 3 h job, 5 min fixed start-up, 30 GB download, free traffic, checkpoints every 30 min.
    job = make_job(expected_hours=3, expected_startup_min=5, data={"download_gb": 30})
    slow = make_offer(1, dph_base=0.25, inet_down=100)  # 30 GB at 100 Mbit/s = 40 min
    fast = make_offer(2, dph_base=0.28, inet_down=2000)  # 2 min

    plan = plan_job(job, [slow, fast])

    assert [c.offer.id for c in plan.ranking] == [2, 1]
    assert plan.naive_choice is not None and plan.naive_choice.offer.id == 1
    slow_cost, fast_cost = plan.ranking[1], plan.ranking[0]
    assert slow_cost.startup_min == pytest.approx(45)
    assert fast_cost.startup_min == pytest.approx(7)
    # slow: 0.75 + 0.25 × 45/60 + 0.25 × (3.75 h) × (0.1875 + 0.25 × 15/60) = 1.171875
    assert slow_cost.expected_total_usd == pytest.approx(1.171875, rel=1e-5)
    # fast: 0.84 + 0.032667 + 0.25 × 3.116667 × (0.032667 + 0.07) = 0.952661
    assert fast_cost.expected_total_usd == pytest.approx(0.952661, rel=1e-5)
    # Without the download the slow host would have been cheaper: the link is what loses it.
    no_download = make_job(expected_hours=3, expected_startup_min=5, data={"download_gb": 0})
    assert plan_job(no_download, [slow, fast]).ranking[0].offer.id == 1


def test_upload_traffic_counts_every_checkpoint_including_the_last():
    job = make_job(data={"download_gb": 0, "upload_gb_per_checkpoint": 0.5})
    offer = make_offer(1, inet_up_cost=0.02)
    checkpoint_every_25 = make_job(
        data={"download_gb": 0, "upload_gb_per_checkpoint": 0.5}, checkpoint={"interval_min": 25}
    )
    # 120 min / 30 = 4 checkpoints; 120 / 25 = 4.8 → 5. Each 0.5 GB at $0.02/GB.
    assert cost_offer(job, offer).breakdown.upload_usd == pytest.approx(4 * 0.5 * 0.02)
    assert cost_offer(checkpoint_every_25, offer).breakdown.upload_usd == pytest.approx(0.05)


def test_storage_for_the_job_disk_is_part_of_the_hourly_price():
    job = make_job(resources={"min_disk_gb": 72})
    offer = make_offer(1, dph_base=0.30, storage_cost=0.2)  # 0.2 $/GB/month × 72 GB / 720 h
    assert cost_offer(job, offer).usd_per_hour == pytest.approx(0.32)


def test_startup_override_replaces_the_jobs_fixed_startup():
    job = make_job(data={"download_gb": 0})
    offer = make_offer(1)
    assert plan_job(job, [offer]).ranking[0].startup_min == pytest.approx(6)
    overridden = plan_job(job, [offer], startup_min=0).ranking[0]
    assert overridden.startup_min == 0
    assert overridden.breakdown.startup_usd == 0


def test_components_add_up_to_the_total():
    job = make_job(data={"download_gb": 15, "upload_gb_per_checkpoint": 0.3})
    c = cost_offer(job, make_offer(1, inet_down_cost=0.003, inet_up_cost=0.004, reliability2=0.97))
    b = c.breakdown
    parts = b.compute_usd + b.startup_usd + b.download_usd + b.upload_usd + b.interruption_usd
    assert c.expected_total_usd == pytest.approx(parts)
    assert b.traffic_usd == pytest.approx(b.download_usd + b.upload_usd)


def test_a_less_reliable_host_costs_more_at_the_same_price():
    job = make_job()
    shaky = cost_offer(job, make_offer(1, reliability2=0.90))
    solid = cost_offer(job, make_offer(2, reliability2=0.999))
    assert shaky.expected_restarts > solid.expected_restarts > 0
    assert shaky.expected_total_usd > solid.expected_total_usd


# --- reliability → MTBF ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reliability", "mtbf_h"),
    [(0.999, 999), (0.99, 99), (0.95, 19), (0.9, 9), (0.8, 4), (0.5, 1)],
)
def test_reliability_is_read_as_uptime_with_one_hour_outages(reliability, mtbf_h):
    assert cost.mtbf_hours(make_offer(1, reliability2=reliability)) == pytest.approx(mtbf_h)


def test_perfect_or_missing_reliability_still_fails_sometimes():
    perfect = make_offer(1, reliability2=1.0)
    assert math.isfinite(cost.mtbf_hours(perfect))
    assert cost.mtbf_hours(perfect) == pytest.approx(9999)
    unknown = make_offer(2, reliability2=None, reliability=None)  # counts as 0.9
    assert cost.mtbf_hours(unknown) == pytest.approx(9)


# --- checkpoint interval -----------------------------------------------------------------------


def test_interval_is_young_daly_when_the_startup_cap_is_loose():
    # Upload 1 GB at 80 Mbit/s = 100 s = 1.6667 min; MTBF 4 h = 240 min.
    # sqrt(2 × 1.6667 × 240) = sqrt(800) = 28.28 min, under the cap of 30 min of start-up.
    job = make_job(
        expected_startup_min=30,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    offer = make_offer(1, inet_up=80)
    assert cost.recommend_checkpoint_interval(job, offer) == pytest.approx(math.sqrt(800))


def test_interval_is_capped_so_a_lost_interval_costs_less_than_a_startup():
    # Same Young/Daly figure (28.28 min), but one start-up costs only 5 minutes of the host.
    job = make_job(
        expected_startup_min=5,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    assert cost.recommend_checkpoint_interval(job, make_offer(1, inet_up=80)) == pytest.approx(5)


def test_download_traffic_raises_the_cap():
    # Start-up: 5 min + 10 GB at 8000 Mbit/s (10 s) billed at $0.40/h, plus $0.20 of traffic:
    # the cap is 5.1667 + 0.20 / 0.40 × 60 = 35.17 min; Young/Daly (28.28) is under it.
    job = make_job(
        expected_startup_min=5,
        data={"download_gb": 10, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    offer = make_offer(1, dph_base=0.40, inet_up=80, inet_down_cost=0.02)
    assert cost.recommend_checkpoint_interval(job, offer) == pytest.approx(math.sqrt(800))
    cheap_traffic = make_offer(2, dph_base=0.40, inet_up=80, inet_down_cost=0.0)
    assert cost.recommend_checkpoint_interval(job, cheap_traffic) == pytest.approx(5 + 10 / 60)


def test_interval_never_drops_below_the_time_a_checkpoint_takes():
    job = make_job(
        expected_startup_min=0,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 0},
        checkpoint={"interval_min": None},
    )
    assert cost.recommend_checkpoint_interval(job, make_offer(1)) == pytest.approx(
        cost.MIN_CHECKPOINT_COST_MIN
    )


def test_unknown_upload_speed_is_assumed_slow():
    job = make_job(
        expected_startup_min=600,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    # 1 GB at the assumed 10 Mbit/s = 800 s = 13.33 min; × MTBF 240 min × 2 = 6400 → 80 min.
    assert cost.recommend_checkpoint_interval(job, make_offer(1, inet_up=0)) == pytest.approx(80)


def test_plan_recommends_the_interval_of_its_top_offer_and_costs_use_the_jobs_own():
    fixed = make_job(data={"download_gb": 0}, expected_startup_min=5)  # interval_min 30
    plan = plan_job(fixed, [make_offer(1)])
    assert plan.ranking[0].checkpoint_interval_min == 30
    assert plan.checkpoint_interval_min == pytest.approx(5)  # the cap: one start-up
    unset = make_job(
        data={"download_gb": 0}, expected_startup_min=5, checkpoint={"interval_min": None}
    )
    assert plan_job(unset, [make_offer(1)]).ranking[0].checkpoint_interval_min == pytest.approx(5)


# --- which offers qualify ----------------------------------------------------------------------

STRICT = {
    "gpu_names": ["RTX 4090", "RTX 3090"],
    "gpu_count": 1,
    "min_gpu_ram_gb": 24,
    "min_disk_gb": 60,
    "min_reliability": 0.95,
    "min_download_mbps": 200,
    "max_usd_per_hour": 0.5,
}


@pytest.mark.parametrize(
    ("fields", "constraint"),
    [
        ({"gpu_name": "RTX 4080"}, "resources.gpu_names"),
        ({"num_gpus": 2}, "resources.gpu_count"),
        ({"gpu_ram": 16384}, "resources.min_gpu_ram_gb"),
        ({"disk_space": 59.9}, "resources.min_disk_gb"),
        ({"reliability2": 0.94}, "resources.min_reliability"),
        ({"inet_down": 199}, "resources.min_download_mbps"),
        ({"dph_base": 0.51}, "resources.max_usd_per_hour"),
        ({"rentable": False}, "rentable"),
        ({"rented": True}, "rentable"),
        # A zero price cannot be ranked; no price at all is not an offer (test_offer.py).
        ({"dph_base": 0, "dph_total": 0}, "price"),
    ],
)
def test_each_constraint_excludes_on_its_own(fields, constraint):
    job = make_job(resources=STRICT)
    assert cost.unmet_constraints(job, make_offer(1, reliability2=0.99)) == []
    assert cost.unmet_constraints(job, make_offer(1, **{"reliability2": 0.99, **fields})) == [
        constraint
    ]


def test_gpu_names_match_case_insensitively_and_exactly():
    job = make_job(resources={"gpu_names": ["rtx 4090"]})
    assert cost.unmet_constraints(job, make_offer(1, gpu_name="RTX 4090")) == []
    assert cost.unmet_constraints(job, make_offer(2, gpu_name="RTX 4090 D")) == [
        "resources.gpu_names"
    ]


def test_a_24_gb_card_meets_24_gb_as_vast_counts_it():
    # Vast reports an RTX 4090 as 24564 MB (under 24 GiB); its search takes GB × 1000.
    job = make_job(resources={"min_gpu_ram_gb": 24})
    assert cost.unmet_constraints(job, make_offer(1, gpu_ram=24564)) == []


def test_availability_unknown_is_not_held_against_an_offer():
    job = make_job()
    assert cost.unmet_constraints(job, make_offer(1, rentable=None, rented=None)) == []


def test_a_host_without_download_speed_cannot_take_a_job_that_downloads():
    job = make_job()  # min_download_mbps 0, but 20 GB to fetch
    assert cost.unmet_constraints(job, make_offer(1, inet_down=0)) == [
        "resources.min_download_mbps"
    ]
    no_download = make_job(data={"download_gb": 0})
    assert cost.unmet_constraints(no_download, make_offer(1, inet_down=0)) == []


def test_blocklist_skips_machines_that_failed_this_job_before():
    job = make_job()
    best, runner_up = make_offer(1, dph_base=0.1), make_offer(2, dph_base=0.2)
    assert plan_job(job, [best, runner_up]).ranking[0].offer.id == 1
    plan = plan_job(job, [best, runner_up], blocklist={best.machine_id or 0})
    assert [c.offer.id for c in plan.ranking] == [2]
    assert plan.considered == 2


def test_no_qualifying_offer_names_the_constraint_that_excluded_most():
    job = make_job(resources=STRICT)
    offers = [
        make_offer(1, gpu_name="H100 SXM", dph_base=2.0, reliability2=0.99),
        make_offer(2, gpu_name="H100 SXM", reliability2=0.9),
        make_offer(3, reliability2=0.9),
    ]
    with pytest.raises(NoQualifyingOffer) as caught:
        plan_job(job, offers)
    exc = caught.value
    assert exc.excluded == {
        "resources.gpu_names": 2,
        "resources.min_reliability": 2,
        "resources.max_usd_per_hour": 1,
    }
    # Ties are broken by name, so the message is stable.
    assert exc.worst == ("resources.gpu_names", 2)
    assert exc.considered == 3
    assert "resources.gpu_names excluded the most (2 of 3)" in str(exc)


def test_no_offers_at_all():
    with pytest.raises(NoQualifyingOffer) as caught:
        plan_job(make_job(), [])
    assert caught.value.worst is None
    assert str(caught.value) == "no offers to consider"


def test_blocklist_can_be_the_reason_nothing_qualifies():
    offer = make_offer(1)
    with pytest.raises(NoQualifyingOffer) as caught:
        plan_job(make_job(), [offer], blocklist=[offer.machine_id or 0])
    assert caught.value.worst == ("blocklist", 1)


def test_ties_rank_by_price_then_id_and_plan_accepts_any_iterable():
    job = make_job()
    offers = (make_offer(i) for i in (7, 3, 5))  # identical costs
    plan = plan_job(job, offers)
    assert [c.offer.id for c in plan.ranking] == [3, 5, 7]
    assert plan.naive_choice is not None and plan.naive_choice.offer.id == 3


@pytest.mark.parametrize(
    "fields",
    [
        {"gpu_ram": 24000},  # exactly 24 GB as Vast counts it
        {"disk_space": 60},
        {"reliability2": 0.95},
        {"inet_down": 200},
        {"dph_base": 0.5},
    ],
)
def test_an_offer_exactly_at_the_users_limit_qualifies(fields):
    job = make_job(resources=STRICT)
    assert cost.unmet_constraints(job, make_offer(1, **{"reliability2": 0.99, **fields})) == []


def test_the_startup_override_moves_the_interval_cap():
    # The cap is one start-up's worth of the host: 5 min, then 9 min when start-up is 9 min.
    job = make_job(
        expected_startup_min=5,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    offer = make_offer(1, inet_up=80)
    assert cost.recommend_checkpoint_interval(job, offer) == pytest.approx(5)
    assert cost.recommend_checkpoint_interval(job, offer, startup_min=9) == pytest.approx(9)
    assert cost.cost_offer(job, offer, startup_min=9).checkpoint_interval_min == pytest.approx(9)
