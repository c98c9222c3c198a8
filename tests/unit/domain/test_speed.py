"""Work in the spec and the speed prior (functions/domain/speed.py, gpu_reference.py), and the
planner pricing each offer with the hours it would really take there. Expected values are worked
by hand from the reference table's RTX 4090 row (dlperf 97.6, 82.4 TFLOPS per GPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from functions.domain.cost import cost_offer, plan_job
from functions.domain.jobspec import JobSpec, SpecError, load_job_file, parse_job
from functions.domain.offer import Offer
from functions.domain.speed import SpeedEstimate, effective_gpus, prior_estimate
from tests.unit.domain.test_cost import make_job, make_offer

ROOT = Path(__file__).resolve().parents[3]
QLORA = ROOT / "examples" / "qlora-7b" / "job.yaml"


# --- the spec field -------------------------------------------------------------------------


def test_reference_gpu_is_optional_and_unset_by_default() -> None:
    assert make_job().reference_gpu is None


@pytest.mark.parametrize("written", ["RTX 4090", "rtx 4090", "  RTX  4090 "])
def test_reference_gpu_is_stored_as_vast_spells_it(written: str) -> None:
    assert make_job(reference_gpu=written).reference_gpu == "RTX 4090"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("RTX 9999", "'RTX 9999' is not a GPU model with a reference speed; use one of: A100"),
        ("4090", "is not a GPU model with a reference speed"),
        ("", "must not be empty"),
        (4090, "string"),
    ],
)
def test_an_unknown_reference_gpu_is_refused_naming_the_field(value: object, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        make_job(reference_gpu=value)
    [error] = caught.value.errors
    assert error.path == "reference_gpu"
    assert fragment in error.reason


def test_the_accepted_models_are_listed_in_the_reason() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job({**make_job().model_dump(), "reference_gpu": "GTX 480"})
    reason = caught.value.errors[0].reason
    assert "RTX 3090" in reason and "H100 SXM" in reason and "Titan V" in reason


# --- the prior ------------------------------------------------------------------------------


def test_effective_gpus_adds_half_a_gpu_per_extra_gpu() -> None:
    assert [effective_gpus(n) for n in (1, 2, 4, 8)] == [1.0, 1.5, 2.5, 4.5]


def test_without_reference_gpu_the_hours_are_as_given_on_any_host() -> None:
    estimate = prior_estimate(make_job(), make_offer(1, dlperf=48.8))
    assert estimate == SpeedEstimate(
        hours=2.0,
        source="spec",
        runs=0,
        basis="as given",
        detail="as given: expected_hours on any host (no reference_gpu)",
    )


@pytest.mark.parametrize(
    ("dlperf", "hours"),
    [(97.6, 2.0), (48.8, 4.0), (195.2, 1.0)],
)
def test_hours_scale_with_dlperf_against_the_reference(dlperf: float, hours: float) -> None:
    estimate = prior_estimate(make_job(reference_gpu="RTX 4090"), make_offer(1, dlperf=dlperf))
    assert estimate.hours == pytest.approx(hours)
    assert (estimate.source, estimate.runs) == ("prior", 0)


def test_the_detail_names_the_figures() -> None:
    estimate = prior_estimate(make_job(reference_gpu="RTX 4090"), make_offer(1, dlperf=85.21))
    assert estimate.detail == "prior: dlperf 85.2 vs 1x RTX 4090 ref 97.6"


def test_two_gpus_are_compared_with_two_reference_gpus() -> None:
    job = make_job(reference_gpu="RTX 4090", resources={"gpu_count": 2})
    # Reference: 97.6 × 1.5 = 146.4; Vast's dlperf is already the whole machine's.
    estimate = prior_estimate(job, make_offer(1, num_gpus=2, dlperf=73.2))
    assert estimate.hours == pytest.approx(4.0)
    assert estimate.detail == "prior: dlperf 73.2 vs 2x RTX 4090 ref 146.4"


def test_total_flops_is_the_fallback_and_scaled_by_gpu_count() -> None:
    one = prior_estimate(make_job(reference_gpu="RTX 4090"), make_offer(1, total_flops=41.2))
    assert one.hours == pytest.approx(4.0)  # 2 h × 82.4 / 41.2
    assert one.detail == "prior: 41.2 effective TFLOPS vs 1x RTX 4090 ref 82.4"
    # Two GPUs of 41.2 TFLOPS: 41.2 × 1.5 = 61.8 against 82.4 × 1.5 = 123.6.
    job = make_job(reference_gpu="RTX 4090", resources={"gpu_count": 2})
    two = prior_estimate(job, make_offer(2, num_gpus=2, total_flops=82.4))
    assert two.hours == pytest.approx(4.0)


@pytest.mark.parametrize("missing", [None, 0, "n/a"])
def test_dlperf_is_preferred_and_a_missing_one_falls_back(missing: object) -> None:
    job = make_job(reference_gpu="RTX 4090")
    both = prior_estimate(job, make_offer(1, dlperf=195.2, total_flops=41.2))
    assert both.hours == pytest.approx(1.0)
    fallback = prior_estimate(job, make_offer(1, dlperf=missing, total_flops=41.2))
    assert fallback.hours == pytest.approx(4.0)


def test_an_offer_without_speed_figures_gets_the_hours_as_given() -> None:
    estimate = prior_estimate(make_job(reference_gpu="RTX 4090"), make_offer(1))
    assert (estimate.hours, estimate.source) == (2.0, "spec")
    assert estimate.detail == (
        "as given: the offer has no dlperf or total_flops; hours on 1x RTX 4090"
    )


# --- the planner prices the hours on each offer ---------------------------------------------


def offers(fast_usd_per_hour: float) -> list[Offer]:
    """A slow cheap host (half the reference's dlperf) and a fast one at the reference's."""
    return [
        make_offer(1, dph_base=0.30, dlperf=48.8, reliability2=0.9999),
        make_offer(2, dph_base=fast_usd_per_hour, dlperf=97.6, reliability2=0.9999),
    ]


def speed_job(**overrides: Any) -> JobSpec:
    spec: dict[str, Any] = {"data": {"download_gb": 0}, "reference_gpu": "RTX 4090"}
    return make_job(**{**spec, **overrides})


def test_every_time_based_cost_uses_the_hours_on_the_offer() -> None:
    job = make_job(reference_gpu="RTX 4090", data={"download_gb": 0, "upload_gb_per_checkpoint": 1})
    slow = make_offer(1, dph_base=0.30, dlperf=48.8, inet_up_cost=0.01, reliability2=0.8)
    cost = cost_offer(job, slow)
    assert cost.expected_hours == pytest.approx(4.0)
    assert cost.breakdown.compute_usd == pytest.approx(1.20)  # 0.30 $/h × 4 h
    assert cost.breakdown.upload_usd == pytest.approx(0.08)  # ⌈240 / 30⌉ = 8 checkpoints × 1 GB
    assert cost.expected_restarts == pytest.approx(0.25 * 4.1)  # λ 0.25/h × (4 h + 6 min)


def test_the_faster_dearer_host_wins_when_its_speed_outweighs_its_price() -> None:
    # Slow: 0.30 $/h × (4 h + 0.1 h start-up) = $1.23; fast: 0.50 × (2 + 0.1) = $1.05.
    plan = plan_job(speed_job(), offers(0.50))
    assert [c.offer.id for c in plan.ranking] == [2, 1]
    assert [c.expected_total_usd for c in plan.ranking] == [
        pytest.approx(1.05, abs=1e-3),
        pytest.approx(1.23, abs=1e-3),
    ]
    assert plan.naive_choice is not None and plan.naive_choice.offer.id == 1


def test_the_faster_host_loses_when_it_is_too_dear() -> None:
    # Fast at 0.70 $/h: 0.70 × 2.1 = $1.47 against the slow host's $1.23.
    plan = plan_job(speed_job(), offers(0.70))
    assert [c.offer.id for c in plan.ranking] == [1, 2]
    assert plan.ranking[1].expected_total_usd == pytest.approx(1.47, abs=1e-3)


def test_without_reference_gpu_the_planner_keeps_its_old_choice() -> None:
    # Both 2 h: slow 0.30 × 2.1 = $0.63, fast 0.50 × 2.1 = $1.05.
    plan = plan_job(speed_job(reference_gpu=None), offers(0.50))
    assert [c.offer.id for c in plan.ranking] == [1, 2]
    assert {c.speed.source for c in plan.ranking} == {"spec"}


def test_a_measured_pace_can_replace_the_prior() -> None:
    def measured(job: JobSpec, offer: Offer) -> SpeedEstimate:
        return SpeedEstimate(
            hours=1.0, source="measured", runs=3, basis="3 runs", detail="measured: 3 runs"
        )

    plan = plan_job(speed_job(), offers(0.50), estimate=measured)
    assert [c.expected_hours for c in plan.ranking] == [1.0, 1.0]
    assert plan.ranking[0].offer.id == 1  # equal hours: the cheaper hour wins again


# --- the real records -----------------------------------------------------------------------


def real_offers(path: Path) -> list[Offer]:
    return [Offer.model_validate(r) for r in json.loads(path.read_text())["offers"]]


def test_on_real_records_the_example_no_longer_picks_the_slow_3090(
    shared_vast_offers: Path,
) -> None:
    job = load_job_file(QLORA)
    assert job.reference_gpu == "RTX 4090"
    plan = plan_job(job, real_offers(shared_vast_offers))
    best = plan.ranking[0]
    assert best.offer.id != 47957880 and best.offer.gpu_name == "RTX 4090"
    three_090 = next(c for c in plan.ranking if c.offer.id == 47957880)
    # dlperf 44.4 against the 4090's 97.6: 3 h × 97.6 / 44.36 ≈ 6.6 h.
    assert three_090.expected_hours == pytest.approx(6.60, abs=0.01)
    assert best.expected_total_usd < three_090.expected_total_usd
    # Today's meaning (hours on any host) would still rent the 3090 at $0.257/h.
    old = plan_job(job.model_copy(update={"reference_gpu": None}), real_offers(shared_vast_offers))
    assert old.ranking[0].offer.id == 47957880
