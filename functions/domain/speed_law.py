"""The speed law as unknown (pure): how a job's hours follow an offer's published speed, held as a
posterior over the law's exponent and the spec's scale (docs/architecture.md#cost-model).

`functions/domain/speed.py` scales `expected_hours` by reference speed ÷ offer speed, which is
right only when the job's pace grows in proportion to dlperf. A memory-bound fine-tune gains less
(sublinear), a data-loader- or CPU-bound job nothing (flat); renting the fastest host for a flat
job pays more than double (BENCHMARKS.md, planner regret). So the law is held as unknown:

    hours on an offer = expected_hours × ρ^(−a) × e^(−s)

with ρ = `speed.relative_speed` (the offer's dlperf, else effective TFLOPS, ÷ the reference's),
a in `EXPONENTS` (0 flat … 1 proportional) and s the log of how far the spec's `expected_hours`
is off on the reference (0 a priori: the spec is the anchor). The prior weighs the exponents by
`PRIOR_WEIGHTS`; s ~ N(0, `SCALE_SIGMA`²).

Learning. A run on a host gives its measured speed relative to the anchor, y = log(measured
steps/h ÷ (total_steps ÷ expected_hours)), at x = log ρ. Each host deviates from the law by its
own factor, log-normal with `HOST_SIGMA`, so y = s + a·x + noise. Given a, the runs' residuals
r = y − a·x share s: with n runs, S1 = Σr, S2 = Σr², the marginal likelihood is

    log L(a) = −(S2 − k·S1²) / (2 σ²) + const,   k = τ² / (σ² + n τ²)

(σ `HOST_SIGMA`, τ `SCALE_SIGMA`), and s's posterior mean is k·S1. One run on one host
therefore tells the scale (mostly) and, when its ρ is far from 1, the exponent too; runs at two
speed levels tell the exponent. Everything
comes from the sums (n, Σx, Σxx, Σy, Σxy) the pace store already adds atomically
(`calibration.FitSums`); Σy² is the same for every a and cancels.

Choosing. The estimate is the posterior mean of the hours, Σ_a w_a ρ^(−a) e^(−s_a), and the
planner ranks by the cost at those hours: the cost model is affine in the hours (compute, restarts,
upload, all ∝ hours; the checkpoint count's rounding aside), so that is the expected cost under
the posterior.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from functions.domain.calibration import FitSums
from functions.domain.cost import Estimator
from functions.domain.gpu_reference import REFERENCE_SPEEDS
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.speed import SpeedEstimate, effective_gpus, prior_estimate, relative_speed

EXPONENTS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
# w ∝ 0.8^i over EXPONENTS: flatter laws weigh more, as renting a fast host for a job that does
# not use it (flat) is the costliest mistake in the regret bench. Chosen by
# `python bench/planner_regret.py --quick --tune` on books 2 000 000..2 000 039, apart from the
# books BENCHMARKS.md reports: of the candidates there, the one whose worst first-run median
# regret, as a share of dstack's rule's in the same truth, was least (BENCHMARKS.md).
PRIOR_DECAY = 0.8
PRIOR_WEIGHTS: tuple[float, ...] = tuple(
    PRIOR_DECAY**i / sum(PRIOR_DECAY**j for j in range(len(EXPONENTS)))
    for i in range(len(EXPONENTS))
)
HOST_SIGMA = 0.2  # one host's pace around its law (hosts of one model differ: calibration.py)
# What a GPU model's hosts share beyond the law (its own memory or drivers): small next to one
# host's own spread, so one run says little of the model's other hosts (`model_share`).
MODEL_SIGMA = 0.1
SCALE_SIGMA = 0.3  # how far a spec's expected_hours on its reference GPU may be off (log)


# A job's measured runs as the update needs them, summed: x = log ρ, y = log(measured speed ÷
# the anchor's). The fit sums of `calibration.py` in the law's coordinates: `LawSums.of(ratio,
# speed)` is one run on a host of relative speed figure `ratio` that ran at `speed` × the
# anchor's pace (2.0: twice the steps per hour `expected_hours` implies).
LawSums = FitSums


def law_sums(job: JobSpec, fit: FitSums) -> LawSums:
    """The pace store's sums (x = log dlperf, y = log steps/h, `calibration.FitSums`) in the
    law's terms, for a job with `reference_gpu` and `total_steps`; empty otherwise."""
    if fit.runs <= 0 or job.reference_gpu is None or not job.total_steps:
        return LawSums()
    ref = REFERENCE_SPEEDS[job.reference_gpu].dlperf * effective_gpus(job.resources.gpu_count)
    lx, ly = math.log(ref), math.log(job.total_steps / job.expected_hours)
    n = fit.runs
    return LawSums(
        runs=n,
        x=fit.x - n * lx,
        xx=fit.xx - 2 * lx * fit.x + n * lx * lx,
        y=fit.y - n * ly,
        xy=fit.xy - ly * fit.x - lx * fit.y + n * lx * ly,
    )


def model_share(runs: int) -> float:
    """How much of a GPU model's measured deviation from the law its other hosts take: the
    model's share of the variance, MODEL_SIGMA² ÷ (MODEL_SIGMA² + HOST_SIGMA² ÷ runs). The host
    that ran is priced by its own pace (`pace_estimator`'s `hosts`)."""
    if runs <= 0:
        return 0.0
    return MODEL_SIGMA**2 / (MODEL_SIGMA**2 + HOST_SIGMA**2 / runs)


@dataclass(frozen=True)
class Posterior:
    weights: tuple[float, ...]  # per exponent, summing to 1
    log_scales: tuple[float, ...]  # s's posterior mean given each exponent


@dataclass(frozen=True)
class SpeedLaw:
    """The prior over the law and the job's measured runs; `posterior` is what they imply."""

    exponents: tuple[float, ...] = EXPONENTS
    prior_weights: tuple[float, ...] = PRIOR_WEIGHTS
    sums: LawSums = field(default_factory=LawSums)
    host_sigma: float = HOST_SIGMA
    scale_sigma: float = SCALE_SIGMA

    def __post_init__(self) -> None:
        if len(self.exponents) != len(self.prior_weights) or not self.exponents:
            raise ValueError("one prior weight per exponent")
        if any(w < 0 for w in self.prior_weights) or sum(self.prior_weights) <= 0:
            raise ValueError("prior weights must be ≥ 0 and not all 0")

    def observed(self, sums: LawSums) -> SpeedLaw:
        """This law after the runs in `sums` as well."""
        return SpeedLaw(self.exponents, self.prior_weights, self.sums + sums, self.host_sigma,
                        self.scale_sigma)  # fmt: skip

    def observe(self, ratio: float, speed: float) -> SpeedLaw:
        """After one run at `speed` × the anchor's pace on a host of relative speed `ratio`."""
        return self.observed(LawSums.of(ratio, speed))

    @cached_property
    def posterior(self) -> Posterior:
        s, n = self.sums, self.sums.runs
        host2, scale2 = self.host_sigma**2, self.scale_sigma**2
        k = scale2 / (host2 + n * scale2)
        logs, scales = [], []
        for a, w in zip(self.exponents, self.prior_weights, strict=True):
            s1 = s.y - a * s.x
            s2 = -2 * a * s.xy + a * a * s.xx  # Σy² left out: the same for every a
            logs.append(-math.inf if w <= 0 else math.log(w) - (s2 - k * s1 * s1) / (2 * host2))
            scales.append(k * s1)
        top = max(logs)
        raw = [math.exp(v - top) for v in logs]
        total = sum(raw)
        return Posterior(tuple(r / total for r in raw), tuple(scales))

    def hours_factor(self, ratio: float) -> float:
        """Expected hours on a host of relative speed `ratio` ÷ `expected_hours`."""
        post = self.posterior
        return math.fsum(
            w * math.pow(ratio, -a) * math.exp(-s)
            for a, w, s in zip(self.exponents, post.weights, post.log_scales, strict=True)
        )

    def mean_exponent(self) -> float:
        weights = self.posterior.weights
        return sum(a * w for a, w in zip(self.exponents, weights, strict=True))

    def estimate(self, job: JobSpec, offer: Offer) -> SpeedEstimate:
        """The posterior-mean hours on `offer`; the spec's hours (`prior_estimate`) where the job
        names no reference GPU or the offer no speed figure."""
        ratio = relative_speed(job, offer)
        proportional = prior_estimate(job, offer)
        if ratio is None:
            return proportional
        hours = job.expected_hours * self.hours_factor(ratio)
        a = self.mean_exponent()
        runs = self.sums.runs
        figures = proportional.detail.removeprefix("prior: ")
        return SpeedEstimate(
            hours=hours,
            source="prior",  # this host was not measured: its hours follow the law
            basis=f"{proportional.basis}, law ^{a:.2f}",
            detail=f"{'posterior' if runs else 'prior'} over the speed law (mean exponent "
            f"{a:.2f}{f', {runs} run(s) measured' if runs else ''}): {figures}",
        )

    def estimator(self) -> Estimator:
        return self.estimate


def weights_table(law: SpeedLaw) -> Sequence[tuple[float, float]]:
    """(exponent, posterior weight) pairs, for a table or a test."""
    return tuple(zip(law.exponents, law.posterior.weights, strict=True))
