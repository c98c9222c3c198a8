"""The regret bench's measured-pace rule: tether's REAL estimator (`functions.domain.pace.
pace_estimator`) fed with samples simulated from the bench's hidden truth.

Before a book is judged, the job has run `k` times, each on an earlier book of the same world
(same truth model, other hosts), renting what tether would have rented with what it knew then.
Each run trains the whole job (`BENCH_TOTAL_STEPS` steps) on that host in its true hours, with
a small noise (a run's average pace is exact up to step-time jitter: lognormal σ
`MEASURE_SIGMA`), and files the sample tether's lifecycle would: `bounded_sample` with the
prior's pace on the rented offer (`prior_steps_per_hour`, as recorded with a rent) and its
dlperf, added to the (GPU model, count) sums as the store's ADD does (`add_sample`). The rule
then plans with `pace_estimator(measures)`; it never sees the truth's exponent.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from bench.lib.regret import HostTruth, Strategy
from functions.domain.cost import Estimator, NoQualifyingOffer, plan_job
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.pace import (
    POOL,
    JobMeasures,
    Pace,
    add_sample,
    bounded_sample,
    gpu_key,
    measures_of,
    pace_estimator,
    prior_steps_per_hour,
)
from functions.domain.speed_law import SpeedLaw

MEASURE_SIGMA = 0.05  # a run's measured hours vs the host's true hours (step-time jitter)
BENCH_TOTAL_STEPS = 10_000  # the bench's jobs in steps (the estimator prices steps)

Key = tuple[str, int]  # (GPU model, GPU count), as the pace store keys a job's runs


def with_steps(job: JobSpec) -> JobSpec:
    """The job as the measured rules plan it: its work in steps."""
    return job.model_copy(update={"total_steps": BENCH_TOTAL_STEPS})


@dataclass
class PaceMemory:
    """One job's measured runs as tether stores them: pace sums per (GPU model, count)."""

    name: str = "bench"
    pool: bool = POOL
    paces: dict[Key, Pace] = field(default_factory=dict)
    law: SpeedLaw | None = None  # tether's prior over the speed law (functions/domain/speed_law.py)

    def observe(self, job: JobSpec, offer: Offer, hours: float) -> None:
        """A run of the whole job (`job.total_steps`) on `offer` in `hours`."""
        steps = float(job.total_steps or BENCH_TOTAL_STEPS)
        runs = sum(p.runs for p in self.paces.values())
        sample = bounded_sample(
            f"{self.name}:g{runs + 1}", offer.gpu_name, offer.num_gpus, steps, hours * 3600,
            prior_steps_per_hour=prior_steps_per_hour(job, offer), dlperf=offer.dlperf,
        )  # fmt: skip
        key = (gpu_key(offer.gpu_name), offer.num_gpus)
        self.paces[key] = add_sample(self.paces.get(key), sample)

    def copy(self) -> PaceMemory:
        return PaceMemory(self.name, self.pool, dict(self.paces), self.law)

    def measures(self) -> JobMeasures:
        return measures_of(self.name, self.paces.values(), ())

    def estimator(self) -> Estimator:
        return pace_estimator(self.measures(), pool=self.pool, law=self.law)


TrueHours = Callable[[Offer], float]


def _run_once(
    job: JobSpec, memory: PaceMemory, offers: Sequence[Offer], true_hours: TrueHours,
    rng: random.Random,
) -> None:  # fmt: skip
    """Rent tether's choice with what `memory` knows, and measure that host's true hours."""
    try:
        plan = plan_job(job, offers, estimate=memory.estimator())
    except NoQualifyingOffer:
        return
    chosen = plan.ranking[0].offer
    memory.observe(job, chosen, true_hours(chosen) * math.exp(rng.gauss(0.0, MEASURE_SIGMA)))


def learn_snapshots(
    job: JobSpec,
    history: Sequence[tuple[Sequence[Offer], Mapping[int, HostTruth]]],
    *,
    pool: bool,
    runs: Collection[int],
    rng: random.Random,
    law: SpeedLaw | None = None,
) -> dict[int, PaceMemory]:
    """What the job knows after each of `runs` earlier runs (one pass, copied at each). `job`
    gives `total_steps` (`with_steps`)."""
    memory = PaceMemory(name=job.name, pool=pool, law=law)
    snapshots = {0: memory.copy()} if 0 in runs else {}
    for done, (offers, truth) in enumerate(history[: max(runs, default=0)], start=1):

        def true_hours(offer: Offer, truth: Mapping[int, HostTruth] = truth) -> float:
            return job.expected_hours / truth[offer.id].speed

        _run_once(job, memory, offers, true_hours, rng)
        if done in runs:
            snapshots[done] = memory.copy()
    return snapshots


def after_first_generation(
    truth: Mapping[int, HostTruth], rng: random.Random, law: SpeedLaw | None = None
) -> Strategy:
    """tether's pick for the rest of a job after its first generation: it rents what it would
    on a first run (`law`, default tether's prior), that host trains at its true pace (measured
    with `MEASURE_SIGMA` of jitter), the generation's sample is filed, and the replacement is
    planned with what it showed (`pace_estimator` with the law and that host's own pace, as
    `plan_rent` does)."""

    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        job = with_steps(job)
        memory = PaceMemory(name=job.name, law=SpeedLaw() if law is None else law)
        first = plan_job(job, offers, estimate=memory.estimator()).ranking[0].offer
        hours = job.expected_hours / truth[first.id].speed
        measured = hours * math.exp(rng.gauss(0.0, MEASURE_SIGMA))
        memory.observe(job, first, measured)
        steps = float(job.total_steps or BENCH_TOTAL_STEPS)
        hosts = {} if first.machine_id is None else {first.machine_id: steps / measured}
        estimate = pace_estimator(memory.measures(), pool=memory.pool, law=memory.law, hosts=hosts)
        return plan_job(job, offers, estimate=estimate).ranking[0].offer

    return choose
