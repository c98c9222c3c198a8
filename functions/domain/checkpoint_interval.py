"""The checkpoint interval a generation starts with (pure, no I/O).

The planner's interval (`functions.domain.cost.recommend_checkpoint_interval`: Young/Daly,
sqrt(2 × checkpoint cost × MTBF), capped by one start-up) rests on two estimates that this job
may already have measured when it rents a replacement: the checkpoint cost (the median of the
upload times its agents reported, `last_upload_s`, in place of size ÷ the offer's upload speed)
and the failure rate (the offer's reliability as a prior worth `PRIOR_WEIGHT_H` hours on host,
blended with the job's own deaths and hangs: docs/decisions/0003-learned-rates.md).

`spec checkpoint.interval_min` overrides both, as it overrides the planner's interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.cost import failure_rate_per_hour, recommend_checkpoint_interval
from functions.domain.job import Generation
from functions.domain.jobspec import JobSpec
from functions.domain.market import Bid
from functions.domain.offer import Offer
from functions.domain.rates import posterior_rate_per_hour

PRIOR_WEIGHT_H = 24.0  # hours on host the reliability prior counts as
HOST_FAILURES = frozenset({"dead", "hung"})  # a crash is the script's, not the host's

IntervalSource = Literal["spec", "recommended", "measured"]


class IntervalChoice(BaseModel):
    """The interval a generation is started with, and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    minutes: float
    source: IntervalSource  # spec: as written; recommended: the planner's; measured: recomputed
    upload_s: float | None = None  # the measured upload time used, if any
    failures_per_hour: float | None = None  # the failure rate used (None: spec)
    detail: str

    @property
    def seconds(self) -> int:
        return max(1, round(self.minutes * 60))


def measured_upload_s(generations: Iterable[Generation]) -> float | None:
    """The median of the last checkpoint upload times the job's generations reported."""
    values = [
        g.heartbeat.last_upload_s
        for g in generations
        if g.heartbeat is not None and g.heartbeat.last_upload_s is not None
    ]
    return statistics.median(values) if values else None


def hours_on_host(generation: Generation, now: float) -> float:
    """Rent → end (or now): the time the generation could have been interrupted in."""
    if generation.created_at <= 0:
        return 0.0
    end = generation.ended_at if generation.ended_at is not None else now
    return max(0.0, end - generation.created_at) / 3600.0


def measured_interruptions(generations: Iterable[Generation], now: float) -> tuple[int, float]:
    """(generations replaced as dead or hung, hours on host) over the job's generations."""
    count, hours = 0, 0.0
    for generation in generations:
        hours += hours_on_host(generation, now)
        count += generation.replaced_for in HOST_FAILURES
    return count, hours


def blended_failure_rate(
    prior_per_hour: float, failures: int, hours: float, *, weight_h: float = PRIOR_WEIGHT_H
) -> float:
    """The prior rate and the job's own record, blended (docs/decisions/0003-learned-rates.md)."""
    return posterior_rate_per_hour(prior_per_hour, failures, hours, prior_hours=weight_h)


def generation_interval(
    job: JobSpec,
    offer: Offer,
    generations: Sequence[Generation],
    *,
    now: float,
    startup_min: float | None = None,
    bid: Bid | None = None,
) -> IntervalChoice:
    """The interval for a generation rented on `offer`, given the job's generations so far;
    with `bid` (an interruptible rent) its outbid hazard adds to the failure rate."""
    if job.checkpoint.interval_min is not None:
        return IntervalChoice(
            minutes=job.checkpoint.interval_min,
            source="spec",
            detail=f"spec checkpoint.interval_min {job.checkpoint.interval_min:g}",
        )
    upload_s = measured_upload_s(generations)
    failures, hours = measured_interruptions(generations, now)
    prior = failure_rate_per_hour(offer)
    rate = blended_failure_rate(prior, failures, hours) if hours > 0 else prior
    minutes = recommend_checkpoint_interval(
        job,
        offer,
        startup_min=startup_min,
        upload_min=None if upload_s is None else upload_s / 60.0,
        failures_per_hour=rate,
        bid=bid,
    )
    outbids = "" if bid is None else f", plus outbid hazard {bid.hazard.per_hour:.3g}/h"
    parts = []
    if upload_s is not None:
        parts.append(f"upload {upload_s:.3g} s measured")
    if hours > 0:
        parts.append(f"{failures} host failure(s) in {hours:.1f} h on host, prior {prior:.3g}/h")
    if not parts:
        return IntervalChoice(
            minutes=minutes,
            source="recommended",
            failures_per_hour=rate,
            detail=f"Young/Daly from the offer, reliability prior {prior:.3g}/h{outbids}",
        )
    return IntervalChoice(
        minutes=minutes,
        source="measured",
        upload_s=upload_s,
        failures_per_hour=rate,
        detail=f"Young/Daly, {'; '.join(parts)} → {rate:.3g}/h{outbids}",
    )
