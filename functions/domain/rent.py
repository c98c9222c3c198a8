"""The lifecycle's rent decision (pure, no I/O): which offers to try, or why not to rent now.

`plan_rent` is to provisioning what `reconcile` is to the monitor: the lifecycle gathers the
job, the market and the hosts' reputations, this decides, and the lifecycle rents down the plan
(an offer taken meanwhile → the next one; none left → wait for capacity) and records the result
(`functions/lifecycle/provision.py`).

A plan is refused when no offer qualifies (wait and try again, backing off) or when the remaining
budget would not cover start-up and one checkpoint interval on the best offer (stop the job:
renting would spend money on a host that cannot save any work).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.blame import blocklist
from functions.domain.checkpoint_interval import IntervalChoice, generation_interval
from functions.domain.cost import NoQualifyingOffer, OfferCost, plan_job
from functions.domain.job import Generation, HostReputation, Job, with_known_spend
from functions.domain.labels import instance_label
from functions.domain.lease import lease_expires_at
from functions.domain.market import OutbidHazard, job_hazard
from functions.domain.offer import Offer
from functions.domain.outbid import bid_prices, outbid_history
from functions.domain.pace import (
    JobMeasures,
    Pace,
    add_sample,
    done_step,
    gpu_key,
    host_paces,
    measures_of,
    pace_estimator,
    pace_sample,
    startup_estimator,
    work_spec,
)
from functions.domain.speed import SpeedEstimate, StartupEstimate
from functions.domain.speed_law import SpeedLaw
from functions.domain.spend import GenerationPrices

MAX_OFFERS_PER_ATTEMPT = 5  # offers tried in one provision step before waiting for capacity
CAPACITY_FIRST_WAIT_S = 60
CAPACITY_MAX_WAIT_S = 600


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RentCandidate(_Frozen):
    """One offer to try, with what a rent of it would be recorded with."""

    offer: Offer
    prices: GenerationPrices
    lease_expires_at: float
    expected_total_usd: float
    bid_usd_per_hour: float | None = None  # interruptible: rent with this bid (GPU $/h)
    # The checkpoint interval the host is started with (`functions.domain.checkpoint_interval`).
    checkpoint_interval: IntervalChoice | None = None
    speed: SpeedEstimate | None = None  # the hours the plan assumed here, and where from
    startup: StartupEstimate | None = None  # the fixed start-up it assumed, and where from


class RentPlan(_Frozen):
    job_id: str
    generation: int
    label: str
    disk_gb: float
    candidates: tuple[RentCandidate, ...]  # best first; try each until one rents


class Refusal(_Frozen):
    """No rent now: `no_capacity` waits and tries again, `over_budget` stops the job."""

    outcome: Literal["no_capacity", "over_budget"]
    reason: str


def plan_rent(
    job: Job,
    offers: Iterable[Offer],
    *,
    generation: int,
    generations: Iterable[Generation],
    reputations: Mapping[int, HostReputation],
    now: float,
    max_offers: int = MAX_OFFERS_PER_ATTEMPT,
    measures: JobMeasures | None = None,
    law: SpeedLaw | None = None,
) -> RentPlan | Refusal:
    """The offers to try for `generation` of `job`, best expected total first, skipping the
    hosts `blocklist` names (this job's blamed hosts, and hosts whose decaying blame is still
    high: `functions/domain/blame.py`); or the reason not to rent now. `measures`: the pace and
    start-up learned for the job's name (`functions/domain/pace.py`), priced for the work left
    after the step this generation resumes from; None: the paces the job's own generations
    showed (`own_measures`) and the spec's start-up. `law`: the prior over the speed law
    (`functions/domain/speed_law.py`, default its own), updated by those measures, so a
    replacement is priced by what the job's hosts showed, and a machine it ran on at its own
    pace (`host_paces`)."""
    generations = tuple(generations)
    job = with_known_spend(job, generations)  # the budget and the lease on the exact spend
    # The work in steps: the spec's `total_steps`, else the total the script reported.
    spec = work_spec(job.spec, generations)
    if spec is not job.spec:
        job = job.model_copy(update={"spec": spec})
    blocked = blocklist(generations, reputations, now=now)
    learned = measures or own_measures(job.name, generations)
    try:
        hazard = learned_job_hazard(job, generations, now)
        plan = plan_job(
            job.spec, offers, blocklist=blocked, hazard=hazard,
            estimate=pace_estimator(
                learned, resume_step=done_step(job, generation),
                law=SpeedLaw() if law is None else law, hosts=host_paces(generations),
            ),
            estimate_startup=startup_estimator(learned),
        )  # fmt: skip
    except NoQualifyingOffer as exc:
        return Refusal(outcome="no_capacity", reason=f"no offer qualifies: {exc.describe()}")
    affordable, why = budget_allows_rent(job, plan.ranking[0])
    if not affordable:
        return Refusal(outcome="over_budget", reason=why)
    disk_gb = job.spec.resources.min_disk_gb
    candidates = []
    for choice in plan.ranking[:max_offers]:
        # Interruptible: billed at the bid while it runs.
        prices = bid_prices(
            GenerationPrices.from_offer(choice.offer, disk_gb), choice.bid_usd_per_hour
        )
        lease_at = lease_expires_at(
            now,
            lease_window_s=job.spec.policy.lease_window_s,
            budget_usd=job.budget_usd,
            spent_usd=job.spent_usd,
            usd_per_hour=prices.usd_per_hour,
        )
        candidates.append(
            RentCandidate(
                offer=choice.offer,
                prices=prices,
                lease_expires_at=lease_at,
                expected_total_usd=choice.expected_total_usd,
                bid_usd_per_hour=choice.bid_usd_per_hour,
                checkpoint_interval=generation_interval(
                    job.spec,
                    choice.offer,
                    generations,
                    now=now,
                    bid=choice.bid,
                    startup_min=choice.startup.minutes if choice.startup else None,
                ),
                speed=choice.speed,
                startup=choice.startup,
            )
        )
    return RentPlan(
        job_id=job.job_id,
        generation=generation,
        label=instance_label(job.job_id, generation),
        disk_gb=disk_gb,
        candidates=tuple(candidates),
    )


def own_measures(name: str, generations: Iterable[Generation]) -> JobMeasures:
    """The paces the job's own generations showed (`pace_sample`), as the store would hold them
    once each was filed: what a plan without the name's stored measures still knows."""
    paces: dict[tuple[str, int], Pace] = {}
    for generation in generations:
        sample = pace_sample(generation)
        if sample is not None:
            key = (gpu_key(sample.gpu_name), sample.gpu_count)
            paces[key] = add_sample(paces.get(key), sample)
    return measures_of(name, paces.values(), ())


def learned_job_hazard(job: Job, generations: Iterable[Generation], now: float) -> OutbidHazard:
    """The outbid rate to plan with: the spec's, learned from the job's own outbids once it has
    run on interruptible hosts (`functions.domain.market.learned_hazard`)."""
    history = outbid_history(generations, now)
    return job_hazard(job.spec, outbids=history.outbids, hours=history.interruptible_hours)


def capacity_wait_s(attempt: int) -> int:
    """Back-off while no offer qualifies: 60 s, 120 s, 240 s, … at most 10 minutes."""
    return int(min(CAPACITY_MAX_WAIT_S, CAPACITY_FIRST_WAIT_S * 2 ** max(0, attempt - 1)))


def capacity_attempt(waited_s: float) -> int:
    """Which attempt comes after `waited_s` seconds of back-off (inverse of the schedule)."""
    attempt, total = 1, 0.0
    while total + capacity_wait_s(attempt) <= waited_s + 1e-9:
        total += capacity_wait_s(attempt)
        attempt += 1
    return attempt


def startup_cost_usd(choice: OfferCost, interval_min: float | None) -> float:
    """What the next host costs before it has saved its first checkpoint: start-up plus one
    checkpoint interval at its $/h, and the start-up download."""
    interval = interval_min if interval_min is not None else choice.checkpoint_interval_min
    hours = (choice.startup_min + interval) / 60
    return choice.usd_per_hour * hours + choice.breakdown.download_usd


def budget_allows_rent(job: Job, choice: OfferCost) -> tuple[bool, str]:
    """Rent only if the remaining budget covers start-up and one checkpoint interval."""
    needed = startup_cost_usd(choice, job.spec.checkpoint.interval_min)
    remaining = job.remaining_budget_usd
    if remaining < needed:
        return False, (
            f"remaining budget ${remaining:.2f} does not cover start-up and one checkpoint "
            f"interval on the best offer (${needed:.2f} at ${choice.usd_per_hour:.3f}/h)"
        )
    return True, f"remaining budget ${remaining:.2f} covers ${needed:.2f}"


__all__ = [
    "Refusal",
    "RentCandidate",
    "RentPlan",
    "blocklist",
    "budget_allows_rent",
    "capacity_attempt",
    "capacity_wait_s",
    "learned_job_hazard",
    "own_measures",
    "plan_rent",
    "startup_cost_usd",
]
