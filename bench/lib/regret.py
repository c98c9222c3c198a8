"""Planner regret: how much more than the best host a host-choice rule costs, under a hidden truth.

The planner (`functions.domain.cost.plan_job`) prices every host at the job's `expected_hours`
and `expected_startup_min`; a real host is faster or slower than that and starts up in its own
time. This module holds the yardstick's pure parts:

- a **hidden truth** per host (`HostTruth`): its speed relative to the reference GPU and its
  fixed start-up minutes. `draw_truth` draws it from the offer's `dlperf` (Vast's own DL score):
  speed = (dlperf per GPU / reference dlperf) ^ exponent × lognormal(0, sigma), start-up uniform
  in `startup_min`. The rules being judged never see it.
- the **true cost** of the job on a host: `functions.domain.cost.cost_offer` itself, run on the
  job with `expected_hours` = expected hours / true speed and the true start-up minutes. GPU and
  storage over the true hours, traffic and interruptions as the planner prices them; no pricing
  is re-implemented here.
- the **strategies**, each a function (job, qualifying offers) → the host it rents, and
  `speed_aware(hours)`, the slot for a speed model: any function (job, offer) → expected hours.
- **regret** = chosen host's true cost / the oracle's true cost − 1 (the oracle knows the truth).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from functions.domain.cost import cost_offer, plan_job, unmet_constraints
from functions.domain.jobspec import JobSpec
from functions.domain.offer import Offer
from functions.domain.pace import JobMeasures, pace_estimator
from functions.domain.speed import effective_gpus
from functions.domain.speed_law import SpeedLaw
from tether_local.vast_sim.offers import GPU_MODELS

REFERENCE_GPU = "RTX 4090"  # the GPU the example jobs' `expected_hours` are written for
REFERENCE_DLPERF = next(g.dlperf_per_gpu for g in GPU_MODELS if g.name == REFERENCE_GPU)
PICKED_ORACLE_TOL = 1e-9  # a regret this small is the oracle's cost (ties between equal hosts)

Strategy = Callable[[JobSpec, Sequence[Offer]], Offer]
HoursModel = Callable[[JobSpec, Offer], float]


@dataclass(frozen=True)
class HostTruth:
    """What the rules cannot see about one host."""

    speed: float  # work per hour relative to the reference GPU (2.0 = twice as fast)
    startup_min: float  # fixed start-up (image pull, install) before the download


@dataclass(frozen=True)
class TruthModel:
    """How `draw_truth` turns an offer's `dlperf` into its hidden speed and start-up."""

    name: str
    exponent: float  # 1: speed ∝ dlperf; < 1: the job gains less than dlperf promises
    sigma: float = 0.2  # log-normal spread of a host's speed around what its dlperf says
    startup_min: tuple[float, float] = (3.0, 12.0)
    reference_dlperf: float = REFERENCE_DLPERF


# dlperf-proportional (what a dlperf-ratio model assumes) and sublinear (a memory-bound
# fine-tune: a 3090 at 28 dlperf runs a 4090's 3-hour job in about 5.5 hours, not 10).
# flat: the GPU does not bound the job (a CPU job such as tiny-cpu, or one bound by its data
# loader): every host at the reference speed, host noise aside.
TRUTHS: tuple[TruthModel, ...] = (
    TruthModel("sublinear", exponent=0.5),
    TruthModel("proportional", exponent=1.0),
    TruthModel("flat", exponent=0.0),
)


def dlperf_per_gpu(offer: Offer) -> float | None:
    """The offer's `dlperf` (a total over its GPUs) per GPU's worth (`effective_gpus`: the
    machine's score grows by about half a GPU per extra GPU), or None when unknown."""
    dlperf = getattr(offer, "dlperf", None)
    if not isinstance(dlperf, int | float) or dlperf <= 0 or offer.num_gpus <= 0:
        return None
    return float(dlperf) / effective_gpus(offer.num_gpus)


def truth_seed(seed: int) -> str:
    """The truth's own random stream, apart from the offer generator's (a str seed is stable)."""
    return f"planner-regret-truth-{seed}"


def draw_truth(offers: Sequence[Offer], model: TruthModel, seed: int) -> dict[int, HostTruth]:
    """Each offer's hidden truth by offer id; the same arguments always draw the same truth.

    Two draws per offer in book order (speed noise, start-up), so models with the same sigma and
    start-up range share a host's noise and differ only by the exponent. An offer without
    `dlperf` runs at the reference speed (noise aside)."""
    rng = random.Random(truth_seed(seed))
    low, high = model.startup_min
    truth: dict[int, HostTruth] = {}
    for offer in offers:
        noise = math.exp(rng.gauss(0.0, model.sigma))
        startup = rng.uniform(low, high)
        per_gpu = dlperf_per_gpu(offer)
        ratio = 1.0 if per_gpu is None else per_gpu / model.reference_dlperf
        truth[offer.id] = HostTruth(speed=ratio**model.exponent * noise, startup_min=startup)
    return truth


def with_hours(job: JobSpec, hours: float) -> JobSpec:
    """The job as if it took `hours` on the host: `expected_hours` without a `reference_gpu`,
    which the cost model takes as given (with one, it would scale the hours by the offer's
    speed a second time)."""
    return job.model_copy(update={"expected_hours": hours, "reference_gpu": None})


def true_cost_usd(job: JobSpec, offer: Offer, truth: HostTruth) -> float:
    """The job's full cost on `offer` had the planner known the host's truth."""
    true_job = with_hours(job, job.expected_hours / truth.speed)
    return cost_offer(true_job, offer, startup_min=truth.startup_min).expected_total_usd


def qualifying(job: JobSpec, offers: Sequence[Offer]) -> list[Offer]:
    """The offers every rule chooses among: those meeting the job's constraints."""
    return [o for o in offers if not unmet_constraints(job, o)]


def _cheapest(offers: Sequence[Offer], price: Callable[[Offer], float]) -> Offer:
    if not offers:
        raise ValueError("no offer to choose from")
    return min(offers, key=lambda o: (price(o), o.id))


def listed_usd_per_hour(offer: Offer) -> float:
    """The price Vast's search lists and sorts by: GPU plus its default disk, no traffic."""
    listed = offer.dph_total if offer.dph_total is not None else offer.dph_base
    return listed or 0.0


def tether_planner(job: JobSpec, offers: Sequence[Offer]) -> Offer:
    """tether's planner as it is on a first run (`tether plan`, the first rent): lowest expected
    total under its prior over the speed law (`functions/domain/speed_law.py`), at the spec's
    start-up."""
    estimate = pace_estimator(JobMeasures(name=job.name), law=SpeedLaw())
    return plan_job(job, offers, estimate=estimate).ranking[0].offer


def dlperf_prior(job: JobSpec, offers: Sequence[Offer]) -> Offer:
    """tether's planner before the law was held unknown: hours ∝ reference ÷ offer dlperf
    (`functions.domain.speed.prior_estimate`), the law taken as proportional."""
    return plan_job(job, offers).ranking[0].offer


def cheapest_per_hour(job: JobSpec, offers: Sequence[Offer]) -> Offer:
    """The lowest listed `dph_total` (a $/h sort, a catalogue price)."""
    return _cheapest(offers, listed_usd_per_hour)


def dstack_rule(job: JobSpec, offers: Sequence[Offer]) -> Offer:
    """dstack's rule (its offer ordering, per its docs): lowest GPU + disk $/h for the job's disk;
    no bandwidth, no start-up."""
    disk = job.resources.min_disk_gb
    return _cheapest(offers, lambda o: o.usd_per_hour(disk))


def speed_aware(hours: HoursModel) -> Strategy:
    """The slot for a speed model: the planner's full cost with `hours(job, offer)` in place of
    the spec's `expected_hours` (start-up stays the spec's: the model predicts speed only)."""

    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        return _cheapest(
            offers, lambda o: cost_offer(with_hours(job, hours(job, o)), o).expected_total_usd
        )

    return choose


@dataclass(frozen=True)
class DlperfRatio:
    """THE BENCH'S OWN BASELINE speed model, not tether's: expected hours = the spec's hours ×
    reference dlperf / the offer's dlperf per GPU (the spec's hours when `dlperf` is unknown)."""

    reference_dlperf: float = REFERENCE_DLPERF
    exponent: float = 1.0  # the bound row sets the truth's own exponent

    def __call__(self, job: JobSpec, offer: Offer) -> float:
        per_gpu = dlperf_per_gpu(offer)
        if per_gpu is None:
            return job.expected_hours
        ratio: float = (self.reference_dlperf / per_gpu) ** self.exponent
        return job.expected_hours * ratio


def oracle(truth: Mapping[int, HostTruth]) -> Strategy:
    """The host with the lowest true cost: what a rule that knew the truth would rent."""

    def choose(job: JobSpec, offers: Sequence[Offer]) -> Offer:
        return _cheapest(offers, lambda o: true_cost_usd(job, o, truth[o.id]))

    return choose


def regrets(
    job: JobSpec,
    offers: Sequence[Offer],
    truth: Mapping[int, HostTruth],
    strategies: Mapping[str, Strategy],
) -> dict[str, float] | None:
    """Each strategy's regret on one book (its host's true cost / the oracle's − 1), or None
    when no offer qualifies for the job."""
    candidates = qualifying(job, offers)
    if not candidates:
        return None
    costs = {o.id: true_cost_usd(job, o, truth[o.id]) for o in candidates}
    best = min(costs.values())
    return {name: costs[rule(job, candidates).id] / best - 1.0 for name, rule in strategies.items()}


def p90(values: Sequence[float]) -> float:
    """The 90th percentile (inclusive method: it lies within the data)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def summarise(values: Sequence[float]) -> dict[str, Any]:
    """Median, worst decile, mean, and the share of books where the rule rented the oracle's."""
    if not values:
        raise ValueError("no regrets to summarise")
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": p90(values),
        "mean": statistics.fmean(values),
        "max": max(values),
        "picked_oracle": sum(v <= PICKED_ORACLE_TOL for v in values) / len(values),
    }
