"""Pace and start-up learned from a job's own generations (functions/domain/pace.py): samples
with their bounds, the measured pace replacing the prior (for the work left), start-up learned
per machine beating the per-GPU figure beating the spec, and the lifecycle's plan using them.
Expected values are worked by hand in the comments."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.cost import plan_job
from functions.domain.heartbeat_contract import CheckpointRef, GpuProbe
from functions.domain.job import Heartbeat
from functions.domain.jobspec import SpecError
from functions.domain.pace import (
    MAX_SAMPLE_S,
    JobMeasures,
    LearnedStartup,
    Pace,
    done_step,
    measures_json,
    pace_estimator,
    pace_sample,
    prior_steps_per_hour,
    startup_estimator,
    startup_sample,
)
from functions.domain.rent import RentPlan, plan_rent
from tests.unit.domain import builders
from tests.unit.domain.builders import NOW
from tests.unit.domain.test_cost import make_job, make_offer
from tests.unit.domain.test_rent import offer as rent_offer

# 9000 steps in 4 h on one RTX 4090 = 2250 steps/h; 4500 in 4 h on a 3090 = 1125 steps/h.
MEASURES = JobMeasures(
    name="cost-test",
    paces=(
        Pace(gpu_name="RTX 4090", gpu_count=1, steps=9000, seconds=14_400, runs=2),
        Pace(gpu_name="RTX 3090", gpu_count=1, steps=4500, seconds=14_400, runs=1),
    ),
)


# --- the measured pace replaces the prior -----------------------------------------------------


def test_measured_pace_replaces_the_prior_for_total_steps() -> None:
    job = make_job(total_steps=6000, reference_gpu="RTX 4090")
    offer = make_offer(1, dlperf=97.6)  # the prior: 2 h × 97.6 / 97.6 = 2 h
    estimate = pace_estimator(MEASURES)(job, offer)
    # 6000 steps / 2250 steps/h = 2.6667 h, not the prior's 2 h.
    assert estimate.hours == pytest.approx(6000 / 2250)
    assert (estimate.source, estimate.runs) == ("measured", 2)
    assert estimate.basis == "measured, 2 runs"
    assert "2250 steps/h on 1x RTX 4090 over 2 run(s)" in estimate.detail


def test_a_replacement_prices_the_steps_left() -> None:
    job = make_job(total_steps=6000, reference_gpu="RTX 4090")
    measured = pace_estimator(MEASURES, resume_step=1500)
    # Measured: 4500 steps left / 2250 = 2 h.
    assert measured(job, make_offer(1, dlperf=97.6)).hours == pytest.approx(2.0)
    # No pace on an RTX 3080: the prior 2 h × 97.6 / 25.1, scaled to 4500 / 6000 of the work.
    other = measured(job, make_offer(2, gpu_name="RTX 3080", dlperf=25.1))
    assert other.source == "prior"
    assert other.hours == pytest.approx(2 * 97.6 / 25.1 * 0.75)
    assert "4500 of 6000 steps left" in other.detail


def test_without_total_steps_a_measured_reference_pace_replaces_the_dlperf_ratio() -> None:
    job = make_job(reference_gpu="RTX 4090")  # expected_hours 2 on one 4090
    estimate = pace_estimator(MEASURES)(job, make_offer(1, gpu_name="RTX 3090", dlperf=44))
    # 2 h × 2250 / 1125 = 4 h (the prior would say 2 × 97.6 / 44 = 4.44 h).
    assert estimate.hours == pytest.approx(4.0)
    assert estimate.source == "measured"


def test_without_total_steps_or_reference_the_hours_keep_todays_meaning() -> None:
    job = make_job()
    estimate = pace_estimator(MEASURES, resume_step=1500)(job, make_offer(1, dlperf=97.6))
    assert (estimate.hours, estimate.source) == (2.0, "spec")


def test_pace_is_per_gpu_count_and_ignores_case() -> None:
    assert MEASURES.pace_for("rtx  4090", 1) is not None
    assert MEASURES.pace_for("RTX 4090", 2) is None


@pytest.mark.parametrize(
    ("pace_4090", "winner"),
    [
        # 3090 at 1125 steps/h: 6000 steps = 5.33 h × $0.20 = $1.067 compute;
        # 4090 at 3000 steps/h: 2 h × $0.40 = $0.80: the faster dearer host wins.
        (3000.0, 2),
        # 4090 at 1500 steps/h: 4 h × $0.40 = $1.60: it loses.
        (1500.0, 1),
    ],
)
def test_the_faster_dearer_host_wins_or_loses_on_measured_pace(
    pace_4090: float, winner: int
) -> None:
    job = make_job(total_steps=6000, data={"download_gb": 0})
    offers = [
        make_offer(1, gpu_name="RTX 3090", dph_base=0.20, reliability2=0.9999),
        make_offer(2, gpu_name="RTX 4090", dph_base=0.40, reliability2=0.9999),
    ]
    measures = JobMeasures(
        name="cost-test",
        paces=(
            Pace(gpu_name="RTX 4090", gpu_count=1, steps=pace_4090, seconds=3600, runs=1),
            Pace(gpu_name="RTX 3090", gpu_count=1, steps=1125, seconds=3600, runs=1),
        ),
    )
    # The prior (no dlperf: 2 h anywhere) ranks the 3090 first.
    assert plan_job(job, offers).ranking[0].offer.id == 1
    plan = plan_job(job, offers, estimate=pace_estimator(measures))
    assert plan.ranking[0].offer.id == winner
    costs = {c.offer.id: c.breakdown.compute_usd for c in plan.ranking}
    assert costs[1] == pytest.approx(6000 / 1125 * 0.20)
    assert costs[2] == pytest.approx(6000 / pace_4090 * 0.40)


# --- learned start-up -------------------------------------------------------------------------

STARTUPS = JobMeasures(
    name="cost-test",
    startups=(
        LearnedStartup(kind="machine", key="10002", seconds=360, runs=2),  # 3 min
        LearnedStartup(kind="gpu", key="RTX 4090", seconds=600, runs=1),  # 10 min
    ),
)


def test_startup_per_machine_beats_per_gpu_beats_the_spec() -> None:
    job = make_job()  # expected_startup_min 6; 20 GB at 8000 Mbit/s = 20 s = 0.3333 min
    offers = [
        make_offer(1, gpu_name="RTX 3090"),  # nothing learned: the spec's 6
        make_offer(2),  # machine 10002: its own 3 min
        make_offer(3),  # machine 10003, an RTX 4090: the model's 10 min
    ]
    plan = plan_job(job, offers, estimate_startup=startup_estimator(STARTUPS))
    by_id = {c.offer.id: c for c in plan.ranking}
    assert by_id[2].startup_min == pytest.approx(3 + 1 / 3)
    assert by_id[3].startup_min == pytest.approx(10 + 1 / 3)
    assert by_id[1].startup_min == pytest.approx(6 + 1 / 3)
    sources = {i: (c.startup.source, c.startup.runs) for i, c in by_id.items() if c.startup}
    assert sources == {1: ("spec", 0), 2: ("machine", 2), 3: ("gpu", 1)}
    # The start-up is billed: $0.30/h × (3 + 1/3) min.
    assert by_id[2].breakdown.startup_usd == pytest.approx(0.30 * (3 + 1 / 3) / 60)


def test_an_explicit_startup_override_beats_what_was_learned() -> None:
    job = make_job()
    plan = plan_job(
        job, [make_offer(2)], startup_min=1, estimate_startup=startup_estimator(STARTUPS)
    )
    assert plan.ranking[0].startup_min == pytest.approx(1 + 1 / 3)
    assert plan.ranking[0].startup is not None and plan.ranking[0].startup.source == "spec"


def test_without_an_estimator_costs_are_todays() -> None:
    job = make_job()
    cost = plan_job(job, [make_offer(1)]).ranking[0]
    assert cost.startup_min == pytest.approx(6 + 1 / 3)
    assert cost.startup is not None and cost.startup.source == "spec"


# --- samples and their bounds ------------------------------------------------------------------


def trained(
    *, seconds: float = 3600, steps: int = 3600, phase: str = "training", **fields: Any
) -> Any:
    """Generation 3 of the builders' job: trained `steps` in `seconds` from step 100."""
    beat = Heartbeat(
        at=NOW, agent_time=NOW, phase=phase, step=100 + steps,
        gpu=GpuProbe(available=True, utilization_pct=90.0),
    )  # fmt: skip
    values: dict[str, Any] = {
        "heartbeat": beat, "training_started_at": NOW - seconds, "training_start_step": 100,
        "gpu_name": "RTX 4090", "gpu_count": 1,
    }  # fmt: skip
    values.update(fields)
    return builders.gen(3, **values)


def test_a_generation_that_trained_gives_its_pace() -> None:
    sample = pace_sample(trained())
    assert sample is not None
    assert (sample.sample_id, sample.gpu_name, sample.gpu_count) == ("t-0123abcd:g3", "RTX 4090", 1)
    assert (sample.steps, sample.seconds) == (3600, 3600)


@pytest.mark.parametrize(
    ("why", "generation"),
    [
        ("under five minutes", trained(seconds=299, steps=299)),
        ("under ten steps", trained(seconds=600, steps=9)),
        ("rented before generations recorded their GPU", trained(gpu_name=None)),
        ("never trained", trained(training_started_at=None)),
    ],
)
def test_too_little_training_gives_no_sample(why: str, generation: Any) -> None:
    assert pace_sample(generation) is None, why


def test_a_long_generation_weighs_at_most_six_hours() -> None:
    sample = pace_sample(trained(seconds=12 * 3600, steps=12 * 3600))
    assert sample is not None
    assert (sample.seconds, sample.steps) == (MAX_SAMPLE_S, MAX_SAMPLE_S)  # pace kept: 1/s


def test_a_hostile_pace_is_clamped_to_four_times_the_prior() -> None:
    # Prior 900 steps/h; the host claims 3600 steps in an hour → clamped to 4 × 900 = 3600. And
    # a billion steps → still 3600.
    within = pace_sample(trained(prior_steps_per_hour=900))
    assert within is not None and within.steps == pytest.approx(3600)
    hostile = pace_sample(trained(steps=10**9, prior_steps_per_hour=900))
    assert hostile is not None and hostile.steps == pytest.approx(3600)
    # Too slow to be true: 3600 steps/h against a 100 000 steps/h prior → 25 000.
    slow = pace_sample(trained(prior_steps_per_hour=100_000))
    assert slow is not None and slow.steps == pytest.approx(25_000)


def test_without_a_prior_in_steps_only_the_absolute_cap_bounds_a_sample() -> None:
    hostile = pace_sample(trained(steps=10**9))
    assert hostile is not None and hostile.steps == pytest.approx(100 * 3600)


def test_after_training_the_last_step_the_monitor_saw_advance_ends_the_sample() -> None:
    # Exited long after: the heartbeat's time would understate the pace; the monitor's
    # progress clock says 1800 steps by NOW - 1800.
    generation = trained(phase="finished", progress_step=1900, progress_at=NOW - 1800)
    sample = pace_sample(generation)
    assert sample is not None and (sample.steps, sample.seconds) == (1800, 1800)


def test_startup_sample_is_rent_to_first_step_less_the_download() -> None:
    spec = make_job().model_copy(update={"name": "t"})  # 20 GB download
    generation = builders.gen(
        2, created_at=NOW - 1000, first_step_at=NOW - 400, gpu_name="RTX 4090",
        inet_down_mbps=800, machine_id=7,
    )  # fmt: skip
    sample = startup_sample(generation, spec)
    # 600 s, less 20 GB × 8000 / 800 Mbit/s = 200 s.
    assert sample is not None and sample.seconds == pytest.approx(400)
    assert (sample.machine_id, sample.gpu_name) == (7, "RTX 4090")
    assert startup_sample(builders.gen(2, gpu_name="RTX 4090"), spec) is None  # no first step


def test_the_prior_pace_recorded_with_a_rent() -> None:
    offer = make_offer(1, dlperf=97.6)
    assert prior_steps_per_hour(make_job(total_steps=6000, reference_gpu="RTX 4090"), offer) == (
        pytest.approx(3000)
    )
    assert prior_steps_per_hour(make_job(), offer) is None


def test_measures_document_shape() -> None:
    doc = measures_json(MEASURES)
    assert doc["paces"][0]["steps_per_hour"] == pytest.approx(2250)
    assert JobMeasures.model_validate(doc) == MEASURES


# --- the lifecycle's plan ---------------------------------------------------------------------


def test_the_replacement_plan_prices_the_work_left_at_the_measured_pace() -> None:
    ref = CheckpointRef(step=1500, generation=1, manifest_key="jobs/x/g1/m.json")
    the_job = builders.job(generation=1).model_copy(
        update={"spec": builders.job().spec.model_copy(update={"total_steps": 6000}),
                "recorded_checkpoints": [ref]}
    )  # fmt: skip
    assert done_step(the_job, 2) == 1500
    offer = rent_offer(1, 0.3)
    measures = JobMeasures(
        name="t",
        paces=(Pace(gpu_name="RTX 4090", gpu_count=1, steps=9000, seconds=14_400, runs=2),),
    )
    plan = plan_rent(
        the_job, [offer], generation=2, generations=(), reputations={}, now=NOW,
        measures=measures,
    )  # fmt: skip
    assert isinstance(plan, RentPlan)
    speed = plan.candidates[0].speed
    assert speed is not None and speed.source == "measured"
    assert speed.hours == pytest.approx(4500 / 2250)
    # Generation 1 starts from scratch: all 6000 steps.
    first = plan_rent(
        the_job, [offer], generation=1, generations=(), reputations={}, now=NOW,
        measures=measures,
    )  # fmt: skip
    assert isinstance(first, RentPlan) and first.candidates[0].speed is not None
    assert first.candidates[0].speed.hours == pytest.approx(6000 / 2250)


# --- total_steps in the spec --------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 10**9 + 1, 2.5, "many", True])
def test_bad_total_steps_is_refused_naming_it(value: Any) -> None:
    with pytest.raises(SpecError) as caught:
        make_job(total_steps=value)
    assert [e.path for e in caught.value.errors] == ["total_steps"]


def test_total_steps_is_optional() -> None:
    assert make_job().total_steps is None
    assert make_job(total_steps=10**9).total_steps == 10**9


def test_a_claimed_instant_startup_is_bounded_by_the_servers_clock() -> None:
    spec = make_job(data={"download_gb": 0})  # heartbeat every 15 s by default
    claimed = builders.gen(
        2, created_at=NOW - 1000, first_step_at=NOW - 999, training_started_at=NOW - 400,
        gpu_name="RTX 4090",
    )  # fmt: skip
    sample = startup_sample(claimed, spec)
    # The first training heartbeat arrived 600 s after the rent: at least 600 − 15 s.
    assert sample is not None and sample.seconds == pytest.approx(585)
