"""The speed law held as unknown (functions/domain/speed_law.py): the prior's hours and ranking,
the update from measured pace moving weight toward the law that produced it, and the planner's
use of it (pace_estimator with a law, plan_rent pricing a replacement by the job's own hosts).
Values worked by hand in the comments."""

from __future__ import annotations

import math

import pytest

from functions.domain.calibration import FitSums
from functions.domain.cost import plan_job
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.job import Generation, Heartbeat
from functions.domain.pace import (
    JobMeasures,
    Pace,
    add_sample,
    bounded_sample,
    host_paces,
    job_speed_law,
    pace_estimator,
)
from functions.domain.rent import RentPlan, own_measures, plan_rent
from functions.domain.speed_law import (
    EXPONENTS,
    PRIOR_WEIGHTS,
    LawSums,
    SpeedLaw,
    law_sums,
    model_share,
    weights_table,
)
from tests.unit.domain import builders
from tests.unit.domain.builders import NOW
from tests.unit.domain.test_cost import make_job, make_offer
from tests.unit.domain.test_rent import offer as rent_offer

REF = 97.6  # one RTX 4090's dlperf (functions/domain/gpu_reference.py)
JOB = make_job(reference_gpu="RTX 4090", total_steps=6000)  # 2 h on one 4090: 3000 steps/h


def prior_factor(ratio: float) -> float:
    """The prior's expected hours ÷ expected_hours on a host of relative speed `ratio`."""
    return math.fsum(w * math.pow(ratio, -a) for a, w in zip(EXPONENTS, PRIOR_WEIGHTS, strict=True))


# --- the prior ----------------------------------------------------------------------------------


def test_the_prior_keeps_the_specs_hours_on_the_reference() -> None:
    law = SpeedLaw()
    assert law.hours_factor(1.0) == pytest.approx(1.0)
    assert [a for a, _ in weights_table(law)] == list(EXPONENTS)
    assert [w for _, w in weights_table(law)] == pytest.approx(PRIOR_WEIGHTS)


def test_the_prior_hours_are_the_mean_over_the_laws() -> None:
    # Half the reference's dlperf, weights .2975 .2380 .1904 .1523 .1218 (∝ 0.8^i):
    # .2975 + .2380 × 2^¼ + .1904 × 2^½ + .1523 × 2^¾ + .1218 × 2 = 1.3495.
    assert pytest.approx((0.2975, 0.2380, 0.1904, 0.1523, 0.1218), abs=1e-4) == PRIOR_WEIGHTS
    estimate = SpeedLaw().estimate(JOB, make_offer(1, dlperf=REF / 2))
    assert estimate.hours == pytest.approx(2 * 1.3495, rel=1e-3)
    assert estimate.source == "prior"
    assert estimate.hours == pytest.approx(2 * prior_factor(0.5))


def test_the_prior_ranks_a_cheap_slower_host_first_as_flatter_laws_weigh_more() -> None:
    # A 4090 at the reference's dlperf for $0.40/h, a host at half its dlperf for $0.22/h.
    # Proportional (the old prior): 2 h × 0.40 = $0.80 against 4 h × 0.22 = $0.88: the 4090.
    # The law's prior: 2 h × 1.35 × 0.22 = $0.59: the slower host (flat would say $0.44).
    job = make_job(reference_gpu="RTX 4090", data={"download_gb": 0})
    fast = make_offer(1, dlperf=REF, dph_base=0.40, reliability2=0.9999)
    slow = make_offer(2, dlperf=REF / 2, dph_base=0.22, reliability2=0.9999)
    assert plan_job(job, [fast, slow]).ranking[0].offer.id == 1
    by_law = plan_job(job, [fast, slow], estimate=SpeedLaw().estimator())
    assert by_law.ranking[0].offer.id == 2


def test_without_reference_gpu_or_speed_figure_the_hours_are_as_given() -> None:
    assert SpeedLaw().estimate(make_job(), make_offer(1, dlperf=20)).hours == 2
    assert SpeedLaw().estimate(JOB, make_offer(1)).hours == 2


def test_a_prior_must_weigh_each_exponent() -> None:
    with pytest.raises(ValueError):
        SpeedLaw(prior_weights=(1.0,))
    with pytest.raises(ValueError):
        SpeedLaw(prior_weights=(0, 0, 0, 0, 0))


# --- learning from measured pace ----------------------------------------------------------------


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_two_hosts_move_the_weight_to_the_law_that_ran_them(exponent: float) -> None:
    # Hosts at 0.4 and 1.6 × the reference's speed figure ran at ratio^a × the anchor's pace.
    law = SpeedLaw().observe(0.4, 0.4**exponent).observe(1.6, 1.6**exponent)
    weights = dict(weights_table(law))
    assert max(weights, key=lambda a: weights[a]) == exponent
    assert weights[exponent] > 2 * PRIOR_WEIGHTS[EXPONENTS.index(exponent)]
    # The hours follow that law on a third host, at the spec's scale.
    assert law.hours_factor(0.25) == pytest.approx(0.25 ** (-exponent), rel=0.15)


def test_one_slow_host_that_ran_at_the_references_pace_says_flat() -> None:
    law = SpeedLaw().observe(0.4, 1.0)
    weights = dict(weights_table(law))
    assert weights[0.0] > PRIOR_WEIGHTS[0] and weights[1.0] < PRIOR_WEIGHTS[-1]
    assert law.mean_exponent() < SpeedLaw().mean_exponent()


def test_one_run_at_the_reference_tells_the_scale_not_the_exponent() -> None:
    # y = log 0.5 at x = 0: every law fits alike; s's posterior mean = k × log 0.5 with
    # k = 0.3² / (0.2² + 0.3²) = 0.6923: the hours × 2^0.6923 on the reference.
    law = SpeedLaw().observe(1.0, 0.5)
    assert law.posterior.weights == pytest.approx(SpeedLaw().posterior.weights)
    assert law.hours_factor(1.0) == pytest.approx(2 ** (0.09 / 0.13))


def test_the_stores_sums_are_the_laws_sums() -> None:
    # A run on a 3090 at 44 dlperf at 1800 steps/h; the anchor is 6000 steps / 2 h.
    fit = FitSums.of(44.0, 1800.0) + FitSums.of(120.0, 3900.0)
    got = law_sums(JOB, fit)
    want = LawSums.of(44 / REF, 1800 / 3000) + LawSums.of(120 / REF, 3900 / 3000)
    for name in ("runs", "x", "xx", "y", "xy"):
        assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-9)
    assert law_sums(make_job(reference_gpu="RTX 4090"), fit) == LawSums()  # no total_steps


# --- the planner with the law -----------------------------------------------------------------


def measured(gpu: str, dlperf: float, steps_per_hour: float) -> Pace:
    """One hour's run on a host of `dlperf` at `steps_per_hour`, filed as the store files it."""
    sample = bounded_sample(
        f"j:{gpu}", gpu, 1, steps_per_hour, 3600, prior_steps_per_hour=None, dlperf=dlperf
    )
    return add_sample(None, sample)


def test_the_estimator_prices_unmeasured_models_by_the_posterior() -> None:
    # The job ran on a 3090 at 0.4 × the reference's dlperf at the reference's pace (flat).
    measures = JobMeasures(name="j", paces=(measured("RTX 3090", 0.4 * REF, 3000),))
    estimate = pace_estimator(measures, law=SpeedLaw())
    posterior = job_speed_law(JOB, measures)
    other = estimate(JOB, make_offer(1, gpu_name="RTX 3080", dlperf=0.25 * REF))
    assert other.hours == pytest.approx(2 * posterior.hours_factor(0.25))
    assert other.hours < 2 * prior_factor(0.25)  # flatter than the prior said
    # Another host of the model that ran: the law's hours × the model's share of how far the
    # run was off them (one run: 0.1² ÷ (0.1² + 0.2²) = 0.2; the rest was that host's own).
    law_hours = 2 * posterior.hours_factor(0.4)
    same = estimate(JOB, make_offer(2, gpu_name="RTX 3090", dlperf=0.4 * REF))
    assert same.source == "measured"
    assert model_share(1) == pytest.approx(0.2)
    assert same.hours == pytest.approx(law_hours * (2.0 / law_hours) ** 0.2)
    # The machine that ran: its own pace, 6000 / 3000 = 2 h.
    ran = make_offer(3, gpu_name="RTX 3090", dlperf=0.4 * REF, machine_id=77)
    mine = pace_estimator(measures, law=SpeedLaw(), hosts={77: 3000.0})(JOB, ran)
    assert (mine.source, mine.hours, mine.basis) == ("measured", 2.0, "measured on this host")


def trained_on(dlperf: float, steps_per_hour: float) -> Generation:
    """Generation 1 of the builders' job: an hour of training on machine 20, an RTX 3090 of
    `dlperf` (`rent_offer(2, ...)`'s machine)."""
    beat = Heartbeat(
        at=NOW, agent_time=NOW, phase="training", step=100 + int(steps_per_hour),
        gpu=GpuProbe(available=True, utilization_pct=90.0),
    )  # fmt: skip
    return builders.gen(
        1, heartbeat=beat, training_started_at=NOW - 3600, training_start_step=100,
        gpu_name="RTX 3090", gpu_count=1, dlperf=dlperf, is_current=False, machine_id=20,
    )  # fmt: skip


def test_a_replacement_is_priced_by_what_the_jobs_own_host_showed() -> None:
    # 6000 steps, 2 h on a 4090 by the spec. Generation 1 ran on a 3090 at 0.4 × its dlperf as
    # fast as the reference (a flat job). A 4090 at $0.50/h against a 3090 at $0.30/h.
    spec = builders.job().spec.model_copy(
        update={"total_steps": 6000, "reference_gpu": "RTX 4090", "expected_hours": 2.0}
    )
    the_job = builders.job(generation=1).model_copy(update={"spec": spec})
    first = trained_on(0.4 * REF, 3000)
    fast = rent_offer(1, 0.50, dlperf=REF)
    slow = rent_offer(2, 0.30, gpu_name="RTX 3090", dlperf=0.4 * REF)
    generations = (first,)
    assert own_measures("j", generations).pace_for("RTX 3090", 1) is not None
    assert host_paces(generations) == {20: pytest.approx(3000.0)}
    plan = plan_rent(
        the_job, [fast, slow], generation=2, generations=generations, reputations={}, now=NOW
    )
    assert isinstance(plan, RentPlan)
    top = plan.candidates[0]
    assert top.offer.id == 2  # 2 h at $0.30 beats 2 h at $0.50
    assert top.speed is not None and top.speed.source == "measured"
    assert top.speed.hours == pytest.approx(2.0, rel=0.01)
    # Without its generations the prior prices the 3090 at 2 h × 0.4^-a on average.
    blind = plan_rent(the_job, [fast, slow], generation=2, generations=(), reputations={}, now=NOW)
    assert isinstance(blind, RentPlan)
    by_id = {c.offer.id: c for c in blind.candidates}
    assert by_id[2].speed is not None
    assert by_id[2].speed.hours == pytest.approx(2 * prior_factor(0.4))
    assert by_id[1].speed is not None
    assert math.isclose(by_id[1].speed.hours, 2.0)
