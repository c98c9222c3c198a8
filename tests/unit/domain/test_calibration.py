"""The measured pace calibrating the speed prior (functions/domain/calibration.py and
`pace_estimator` in functions/domain/pace.py): per GPU model a factor on each host's own prior,
a power law refitted across models, the pooled factor before that, and items stored before
calibration priced as they were. Every expected value is worked by hand in the comments.

The job: 6000 steps, 2 h on one RTX 4090 (dlperf 97.6), so the prior's pace is 3000 steps/h at
dlperf 97.6 and 3000 × dlperf / 97.6 elsewhere."""

from __future__ import annotations

import math

import pytest

from functions.domain.calibration import FitSums, calibration_factor, fit_power_law
from functions.domain.pace import (
    JobMeasures,
    Pace,
    PaceSample,
    add_sample,
    measures_of,
    pace_estimator,
    pace_sample,
)
from tests.unit.domain.test_cost import make_job, make_offer
from tests.unit.domain.test_pace import trained

JOB = make_job(total_steps=6000, reference_gpu="RTX 4090")


def run(n: int, gpu: str, dlperf: float | None, steps_per_hour: float, *,
        prior_per_hour: float | None, hours: float = 1.0) -> PaceSample:  # fmt: skip
    return PaceSample(
        sample_id=f"j:g{n}", gpu_name=gpu, gpu_count=1, steps=steps_per_hour * hours,
        seconds=hours * 3600, dlperf=dlperf,
        prior_steps=None if prior_per_hour is None else prior_per_hour * hours,
    )  # fmt: skip


def measured(*samples: PaceSample) -> JobMeasures:
    paces: dict[str, Pace] = {}
    for s in samples:
        paces[s.gpu_name] = add_sample(paces.get(s.gpu_name), s)
    return measures_of("j", paces.values(), ())


# --- the arithmetic ----------------------------------------------------------------------------


def test_the_factor_is_measured_over_prior_hours_optionally_shrunk() -> None:
    # The prior said 9000 steps in the seconds that trained 6000: 1.5 × the hours.
    assert calibration_factor(9000, 6000, 1) == pytest.approx(1.5)
    # The prior worth one run: 1.5^(1/2) after one run, 1.5^(3/4) after three.
    assert calibration_factor(9000, 6000, 1, prior_runs=1) == pytest.approx(math.sqrt(1.5))
    assert calibration_factor(9000, 6000, 3, prior_runs=1) == pytest.approx(1.5**0.75)
    assert calibration_factor(0, 6000, 1) is None
    assert calibration_factor(9000, 6000, 0) is None


def test_the_power_law_needs_two_dlperf_levels_and_clamps_its_exponent() -> None:
    one = FitSums.of(97.6, 3000) + FitSums.of(97.6, 2000)
    assert fit_power_law(one) is None
    # 3000/h at 97.6, 1500/h at 24.4: a quarter of the dlperf, half the pace → e = 0.5.
    law = fit_power_law(FitSums.of(97.6, 3000) + FitSums.of(24.4, 1500))
    assert law is not None and law.exponent == pytest.approx(0.5) and law.runs == 2
    assert law.steps_per_hour(6.1) == pytest.approx(750)  # 3000 × (1/16)^0.5
    # A 16th of the pace at a quarter of the dlperf would be e = 2: clamped to 1.5, through
    # the points' mean, so at their geometric-mean dlperf (48.8) the pace is √(3000 × 187.5).
    steep = fit_power_law(FitSums.of(97.6, 3000) + FitSums.of(24.4, 187.5))
    assert steep is not None and steep.exponent == 1.5
    assert steep.steps_per_hour(48.8) == pytest.approx(750)


def test_a_sample_carries_the_priors_steps_and_its_hosts_dlperf() -> None:
    # 3600 steps in an hour on a host whose prior was 3000 steps/h, dlperf 97.6.
    sample = pace_sample(trained(prior_steps_per_hour=3000.0, dlperf=97.6))
    assert sample is not None
    assert sample.prior_steps == pytest.approx(3000) and sample.dlperf == 97.6
    pace = add_sample(add_sample(None, sample), sample.model_copy(update={"sample_id": "x"}))
    assert (pace.steps, pace.calibrated_steps, pace.prior_steps) == (7200, 7200, 6000)
    assert (pace.runs, pace.calibrated_runs, pace.fit_runs) == (2, 2, 2)
    assert pace.fit_x == pytest.approx(2 * math.log(97.6))
    # Rented before calibration: neither is known, so nothing is added to the sums.
    old = pace_sample(trained())
    assert old is not None and (old.prior_steps, old.dlperf) == (None, None)
    assert add_sample(None, old).calibrated_runs == 0 and add_sample(None, old).fit_runs == 0


# --- the estimator -----------------------------------------------------------------------------

# The 4090s ran at 2000 steps/h where the prior said 3000: the hours × 1.5.
SLOW_4090 = measured(run(1, "RTX 4090", 97.6, 2000, prior_per_hour=3000, hours=3))


def test_within_a_measured_model_the_faster_host_gets_fewer_hours() -> None:
    estimate = pace_estimator(SLOW_4090)
    median = estimate(JOB, make_offer(1, dlperf=97.6))  # prior 2 h
    fast = estimate(JOB, make_offer(2, dlperf=122.0))  # prior 2 × 97.6 / 122 = 1.6 h
    assert median.hours == pytest.approx(3.0)  # the model's measured pace: 6000 / 2000
    assert fast.hours == pytest.approx(2.4)  # 1.6 × 1.5
    assert (fast.source, fast.runs, fast.basis) == ("measured", 1, "measured, 1 run")
    assert "prior × 1.50" in fast.detail
    # With the prior worth one run the factor is √1.5.
    assert pace_estimator(SLOW_4090, prior_runs=1)(JOB, make_offer(1, dlperf=97.6)).hours == (
        pytest.approx(2 * math.sqrt(1.5))
    )


def test_a_replacement_prices_the_steps_left_on_the_calibrated_prior() -> None:
    half = pace_estimator(SLOW_4090, resume_step=3000)(JOB, make_offer(1, dlperf=97.6))
    assert half.hours == pytest.approx(1.5)  # the prior's 1 h for 3000 steps × 1.5
    assert "3000 of 6000 steps left" in half.detail


def test_one_dlperf_level_carries_the_pooled_factor_to_models_not_run() -> None:
    other = pace_estimator(SLOW_4090)(JOB, make_offer(3, gpu_name="RTX 3090", dlperf=24.4))
    assert other.hours == pytest.approx(8 * 1.5)  # the prior's 8 h × 1.5
    assert (other.source, other.runs, other.basis) == ("prior", 0, "prior, calibrated by 1 run")
    unpooled = pace_estimator(SLOW_4090, pool=False)
    assert unpooled(JOB, make_offer(3, gpu_name="RTX 3090", dlperf=24.4)).hours == (
        pytest.approx(8.0)
    )


def test_two_dlperf_levels_refit_the_law_for_models_not_run() -> None:
    # 3000/h at 97.6 (the prior was right), 1500/h at 24.4 (the prior said 750): e = 0.5.
    measures = measured(
        run(1, "RTX 4090", 97.6, 3000, prior_per_hour=3000),
        run(2, "RTX 3090", 24.4, 1500, prior_per_hour=750),
    )
    estimate = pace_estimator(measures)
    unseen = estimate(JOB, make_offer(4, gpu_name="RTX 3060", dlperf=6.1))
    assert unseen.hours == pytest.approx(6000 / 750)  # 750 steps/h by the law; the prior: 32 h
    assert (unseen.source, unseen.basis) == ("prior", "prior, calibrated by 2 runs")
    assert "dlperf^0.50" in unseen.detail
    # The 3090 itself: its prior 8 h × 750 / 1500.
    seen = estimate(JOB, make_offer(5, gpu_name="RTX 3090", dlperf=24.4))
    assert seen.hours == pytest.approx(4.0)
    assert seen.source == "measured"


def test_items_stored_before_calibration_are_priced_as_before() -> None:
    # Sums without the prior's steps or dlperf: the model at its measured pace, others the prior.
    old = JobMeasures(
        name="j", paces=(Pace(gpu_name="RTX 4090", gpu_count=1, steps=9000, seconds=14_400,
                              runs=2),),
    )  # fmt: skip
    estimate = pace_estimator(old)
    assert estimate(JOB, make_offer(1, dlperf=122.0)).hours == pytest.approx(6000 / 2250)
    other = estimate(JOB, make_offer(3, gpu_name="RTX 3090", dlperf=24.4))
    assert other.hours == pytest.approx(8.0) and (other.source, other.basis) == (
        "prior",
        "dlperf 24",
    )


def test_a_job_without_reference_gpu_pools_but_never_refits() -> None:
    # tiny-cpu-like: 2 h on any host. Two models measured at different dlperf, both 1.5 × slower
    # than the spec said: no law (the job says its hours do not follow the GPU), the pooled
    # factor 1.5 on a third model.
    job = make_job(total_steps=6000)
    measures = measured(
        run(1, "RTX 4090", 97.6, 2000, prior_per_hour=3000),
        run(2, "RTX 3090", 24.4, 2000, prior_per_hour=3000),
    )
    other = pace_estimator(measures)(job, make_offer(4, gpu_name="RTX 3060", dlperf=6.1))
    assert other.hours == pytest.approx(2 * 1.5)
    assert (other.source, other.basis) == ("spec", "as given, calibrated by 2 runs")
