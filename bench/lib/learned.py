"""A SIMULATED measured-pace estimator for the regret bench (not tether's store).

tether is meant to learn each job's pace per (job name, GPU model, GPU count) from heartbeats
and use it in place of the prior (issue 15, Deliver 2; built elsewhere). The bench simulates the
effect: before a book is judged, the job has run `k` times, each on an earlier book of the same
world (same truth model, other hosts), renting what tether would have rented with what it knew
then, and measuring that host's true hours with a small noise (a run's average pace is exact up
to step-time jitter: lognormal σ `MEASURE_SIGMA`). The estimator passed to
`plan_job(estimate=...)`:

- `measured`: a GPU model seen before gets the geometric mean of its measured hours, every other
  offer the prior (`functions.domain.speed.prior_estimate`);
- `fitted` (a proposal): the same for models seen, and for the others the prior's power law
  hours = a × (1 / dlperf)^e refitted to the measured models by least squares in logs, once two
  models with different dlperf have been measured (e clamped to [0, 1.5]); before that the prior.
  It uses measured paces only, never the hidden truth.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from bench.lib.regret import HostTruth
from functions.domain.cost import NoQualifyingOffer, plan_job
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.speed import SpeedEstimate, prior_estimate

MEASURE_SIGMA = 0.05  # a run's measured hours vs the host's true hours (step-time jitter)
EXPONENT_RANGE = (0.0, 1.5)
PRIOR_RUNS = 1  # the prior counts as one run when a model's measured runs calibrate it

Key = tuple[str, int]  # (GPU model, GPU count), as the pace store keys a job's runs


def _key(offer: Offer) -> Key:
    return (offer.gpu_name, offer.num_gpus)


@dataclass
class PaceMemory:
    """One job's measured runs: hours by (GPU model, count), and the dlperf each ran at."""

    fit: bool = False
    runs: dict[Key, list[tuple[float, float | None]]] = field(default_factory=dict)
    # measured hours ÷ the prior's hours on the host each run rented, by (GPU model, count)
    ratios: dict[Key, list[float]] = field(default_factory=dict)
    job: JobSpec | None = None

    def observe(self, offer: Offer, hours: float, prior_hours: float | None = None) -> None:
        dlperf = offer.dlperf if offer.dlperf and offer.dlperf > 0 else None
        self.runs.setdefault(_key(offer), []).append((hours, dlperf))
        if prior_hours is not None and prior_hours > 0:
            self.ratios.setdefault(_key(offer), []).append(hours / prior_hours)

    def measured_hours(self, offer: Offer) -> tuple[float, int] | None:
        seen = self.runs.get(_key(offer))
        if not seen:
            return None
        return math.exp(sum(math.log(h) for h, _ in seen) / len(seen)), len(seen)

    def exponent_fit(self) -> tuple[float, float] | None:
        """(log a, e) of log hours = log a + e × log(1 / dlperf) over the measured runs, or None
        while fewer than two distinct dlperf figures have been measured."""
        points = [(-math.log(d), math.log(h)) for runs in self.runs.values() for h, d in runs if d]
        xs = {round(x, 6) for x, _ in points}
        if len(xs) < 2:
            return None
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        sxx = sum((x - mx) ** 2 for x, _ in points)
        sxy = sum((x - mx) * (y - my) for x, y in points)
        low, high = EXPONENT_RANGE
        e = min(max(sxy / sxx, low), high)
        return my - e * mx, e

    def estimate(self, job: JobSpec, offer: Offer) -> SpeedEstimate:
        seen = self.measured_hours(offer)
        ratios = self.ratios.get(_key(offer))
        if self.fit and ratios:
            # Calibrated: this host's prior × how far the prior was off on this model's runs,
            # so a host's own dlperf still counts within its model.
            ratio = math.exp(sum(math.log(r) for r in ratios) / (len(ratios) + PRIOR_RUNS))
            prior = self._prior(job, offer)
            return SpeedEstimate(
                hours=prior.hours * ratio, source="measured", runs=len(ratios),
                basis=f"{len(ratios)} run(s)", detail=f"measured: prior × {ratio:.2f}",
            )  # fmt: skip
        if seen is not None:
            hours, runs = seen
            return SpeedEstimate(
                hours=hours, source="measured", runs=runs, basis=f"{runs} run(s)",
                detail=f"measured: {offer.gpu_name} over {runs} run(s)",
            )  # fmt: skip
        return self._prior(job, offer)

    def _prior(self, job: JobSpec, offer: Offer) -> SpeedEstimate:
        """The prior, refitted to the measured runs when `fit` and two dlperf levels are known."""
        fitted = self.exponent_fit() if self.fit else None
        if fitted is not None and offer.dlperf and offer.dlperf > 0:
            log_a, e = fitted
            return SpeedEstimate(
                hours=math.exp(log_a - e * math.log(offer.dlperf)), source="prior",
                basis=f"fit e={e:.2f}", detail=f"prior refitted to measured runs (e = {e:.2f})",
            )  # fmt: skip
        return prior_estimate(job, offer)


TrueHours = Callable[[Offer], float]


def _run_once(
    job: JobSpec, memory: PaceMemory, offers: Sequence[Offer], true_hours: TrueHours,
    rng: random.Random,
) -> None:  # fmt: skip
    """Rent tether's choice with what `memory` knows, and measure that host's true hours."""
    try:
        plan = plan_job(job, offers, estimate=memory.estimate)
    except NoQualifyingOffer:
        return
    chosen = plan.ranking[0]
    measured = true_hours(chosen.offer) * math.exp(rng.gauss(0.0, MEASURE_SIGMA))
    memory.observe(chosen.offer, measured, prior_estimate(job, chosen.offer).hours)


def learn_snapshots(
    job: JobSpec,
    history: Sequence[tuple[Sequence[Offer], Mapping[int, HostTruth]]],
    *,
    fit: bool,
    runs: Collection[int],
    rng: random.Random,
) -> dict[int, PaceMemory]:
    """What the job knows after each of `runs` earlier runs (one `learn` pass, copied at each)."""
    memory = PaceMemory(fit=fit)
    snapshots: dict[int, PaceMemory] = {0: copy.deepcopy(memory)} if 0 in runs else {}
    for done, (offers, truth) in enumerate(history, start=1):

        def true_hours(offer: Offer, truth: Mapping[int, HostTruth] = truth) -> float:
            return job.expected_hours / truth[offer.id].speed

        _run_once(job, memory, offers, true_hours, rng)
        if done in runs:
            snapshots[done] = copy.deepcopy(memory)
    return snapshots
