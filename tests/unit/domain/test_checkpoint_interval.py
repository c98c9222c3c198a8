"""The checkpoint interval a generation starts with, recomputed from what the job measured
(functions/domain/checkpoint_interval.py), on hand-computed cases."""

from __future__ import annotations

import math
from typing import Any

import pytest

from functions.domain import cost
from functions.domain.checkpoint_interval import (
    blended_failure_rate,
    generation_interval,
    measured_interruptions,
    measured_upload_s,
)
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Generation, Heartbeat
from functions.domain.rent import RentPlan
from tests.unit.domain.builders import NOW, gen, job
from tests.unit.domain.test_cost import make_job, make_offer
from tests.unit.domain.test_rent import offer as rent_offer
from tests.unit.domain.test_rent import plan

HOUR = 3600.0

# Start-up is long (600 min), so the cap never binds; 1 GB per checkpoint at 80 Mbit/s is
# 1 × 8000 / 80 = 100 s = 1.6667 min; reliability 0.8 → λ₀ = 0.25/h, MTBF 240 min:
# Young/Daly = sqrt(2 × 1.6667 × 240) = sqrt(800) = 28.28 min.
JOB = make_job(
    expected_startup_min=600,
    data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
    checkpoint={"interval_min": None},
)
OFFER = make_offer(1, inet_up=80)


def beat(upload_s: float | None) -> Heartbeat:
    return Heartbeat(
        at=NOW, agent_time=NOW, phase="training", step=10, gpu=GpuProbe(available=True),
        last_upload_s=upload_s,
    )  # fmt: skip


def host(n: int, start_h: float, end_h: float | None, **fields: Any) -> Generation:
    """Generation n on host from `start_h` to `end_h` hours before NOW (None: still there)."""
    ended = None if end_h is None else NOW - end_h * HOUR
    return gen(n, created_at=NOW - start_h * HOUR, ended_at=ended, **fields)


def test_without_measurements_it_is_the_planners_interval() -> None:
    choice = generation_interval(JOB, OFFER, [], now=NOW)
    assert choice.source == "recommended"
    assert choice.minutes == pytest.approx(math.sqrt(800))
    assert choice.seconds == 1697  # 28.284 min
    assert choice.minutes == pytest.approx(cost.recommend_checkpoint_interval(JOB, OFFER))


def test_the_measured_upload_time_replaces_the_size_over_speed_estimate() -> None:
    # Uploads took 240 s and 360 s (the host's inet_up promised 100 s): median 300 s = 5 min;
    # no time on host yet → the prior rate: sqrt(2 × 5 × 240) = sqrt(2400) = 48.99 min.
    generations = [
        host(1, 0, None, heartbeat=beat(240.0)),
        host(2, 0, None, heartbeat=beat(360.0)),
    ]
    choice = generation_interval(JOB, OFFER, generations, now=NOW)
    assert choice.source == "measured"
    assert choice.upload_s == 300.0
    assert choice.minutes == pytest.approx(math.sqrt(2400))
    assert "upload 300 s measured" in choice.detail


def test_a_fast_measured_upload_still_costs_the_minimum_minute() -> None:
    choice = generation_interval(JOB, OFFER, [host(1, 0, None, heartbeat=beat(6.0))], now=NOW)
    assert choice.minutes == pytest.approx(math.sqrt(2 * 1 * 240))  # 21.91 min


def test_host_failures_are_blended_with_the_reliability_prior() -> None:
    # Two hosts died/hung in 3 h on host: λ = (0.25 × 24 + 2) / (24 + 3) = 8 / 27 = 0.2963/h,
    # MTBF 3.375 h = 202.5 min → sqrt(2 × 1.6667 × 202.5) = sqrt(675) = 25.98 min.
    generations = [
        host(1, 3.0, 2.0, replaced_for="dead"),
        host(2, 2.0, 1.0, replaced_for="hung"),
        host(3, 1.0, None),  # still running: counted up to now
    ]
    failures, hours = measured_interruptions(generations, NOW)
    assert failures == 2 and hours == pytest.approx(3.0)
    choice = generation_interval(JOB, OFFER, generations, now=NOW)
    assert choice.source == "measured"
    assert choice.failures_per_hour == pytest.approx(8 / 27)
    assert choice.minutes == pytest.approx(math.sqrt(675))
    assert "2 host failure(s) in 3.0 h on host" in choice.detail


def test_a_crash_is_not_the_hosts_failure_but_its_hours_count() -> None:
    # λ = (0.25 × 24 + 0) / (24 + 6) = 0.2/h → MTBF 300 min → sqrt(2 × 1.6667 × 300) = sqrt(1000).
    choice = generation_interval(JOB, OFFER, [host(1, 6.0, 0.0, replaced_for="crashed")], now=NOW)
    assert choice.failures_per_hour == pytest.approx(0.2)
    assert choice.minutes == pytest.approx(math.sqrt(1000))


def test_the_blend_moves_from_the_prior_to_the_record() -> None:
    assert blended_failure_rate(0.25, 0, 0.0) == pytest.approx(0.25)
    assert blended_failure_rate(0.25, 0, 96.0) == pytest.approx(6 / 120)
    assert blended_failure_rate(0.01, 10, 10_000.0) == pytest.approx(10.24 / 10_024)


def test_the_specs_interval_overrides_every_measurement() -> None:
    spec = make_job(checkpoint={"interval_min": 30})
    measured = [host(1, 3.0, 2.0, replaced_for="dead", heartbeat=beat(600.0))]
    choice = generation_interval(spec, OFFER, measured, now=NOW)
    assert (choice.source, choice.minutes, choice.seconds) == ("spec", 30, 1800)


def test_the_cap_of_one_startup_still_binds_a_measured_interval() -> None:
    short = make_job(
        expected_startup_min=5,
        data={"download_gb": 0, "upload_gb_per_checkpoint": 1},
        checkpoint={"interval_min": None},
    )
    choice = generation_interval(short, OFFER, [host(1, 0, None, heartbeat=beat(300.0))], now=NOW)
    assert choice.minutes == pytest.approx(5)


def test_generations_without_a_report_give_no_upload_time() -> None:
    assert measured_upload_s([host(1, 1.0, None, heartbeat=beat(None)), host(2, 1, None)]) is None


def test_each_rent_candidate_carries_the_interval_for_its_own_offer() -> None:
    # The builders' job (6 min start-up, 0.5 GB per checkpoint default) on two offers with
    # different reliability: each candidate's interval is the one for its own host.
    shaky = rent_offer(1, 0.3, reliability2=0.96)
    solid = rent_offer(2, 0.3, reliability2=0.999)
    result = plan([shaky, solid])
    assert isinstance(result, RentPlan)
    by_offer = {c.offer.id: c.checkpoint_interval for c in result.candidates}
    spec = job().spec
    for offer_id, offer in ((1, shaky), (2, solid)):
        interval = by_offer[offer_id]
        assert interval is not None and interval.source == "recommended"
        assert interval.minutes == pytest.approx(cost.recommend_checkpoint_interval(spec, offer))


def test_a_replacement_is_planned_with_the_jobs_own_record() -> None:
    # Generation 1 died after 2 h with its last upload at 120 s: the candidate's interval for
    # generation 2 uses both.
    dead = host(1, 2.0, 0.0, replaced_for="dead", host_blamed=True, heartbeat=beat(120.0))
    result = plan([rent_offer(1, 0.3, machine_id=99)], generations=(dead,))
    assert isinstance(result, RentPlan)
    interval = result.candidates[0].checkpoint_interval
    assert interval is not None and interval.source == "measured"
    assert interval.upload_s == 120.0
    prior = cost.failure_rate_per_hour(rent_offer(1, 0.3))
    assert interval.failures_per_hour == pytest.approx((prior * 24 + 1) / 26)
