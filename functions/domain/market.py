"""Interruptible (bid) hosts (docs/architecture.md#interruptible-hosts): the bid, the outbid hazard,
the markets.

Vast rents a host two ways. On demand, it runs until tether destroys it, at `dph_base` + storage.
Interruptible, it runs while its bid is the highest: a renter bids at least the offer's `min_bid`
($/h for the GPU/machine part; storage is billed on top, as on demand), and when someone bids
more the marketplace *stops* the instance (an outbid). A stopped instance bills storage only and
resumes when its bid wins again (Vast's billing guide; docs/vast.md).

The bid tether places is `min_bid × (1 + resources.bid_margin)`; while it runs the job pays

    q = bid + storage for the job's disk        (`Bid.running_usd_per_hour`)

An offer without `min_bid` (or with `min_bid ≤ 0`) has no interruptible price: it is left out of
the interruptible market, counted under the constraint `resources.market`.

**Outbids.** They arrive at a constant rate h per hour on the host (a Poisson process, like
failures: `functions.domain.cost`), so expected outbids = h × hours on the host (training +
start-up). Each is priced as a *replacement*: the work since the last checkpoint (half an
interval at q), a new host's start-up (start-up minutes at q) and the download again, exactly as
a failure is priced at q. The monitor may instead wait for the stopped instance to resume (its
disk, image and download kept; storage only while it waits) when waiting is expected to cost
less, so a replacement is the most an outbid costs in the monitor's own reckoning: the planner
does not bet on a resume. The minutes a stopped instance bills storage before the monitor sees
it are left out (40 GB at $0.20/GB/month is $0.011/h).

Outbids add to the host's failures (from `reliability`): on an interruptible host the job is
interrupted at λ + h per hour, and the checkpoint interval recommended for it is Young/Daly at
the combined MTBF 1 / (λ + h), capped as usual with q as the price. The margin is not linked to
the hazard: a wider margin is outbid less often in fact, and that shows in the learned hazard.

**The hazard.** Until the job has run on interruptible hosts it is the spec's
`resources.outbid_hazard_per_hour` (default 0.1: one outbid per ten hours). Then it is learned
from the job's own outbid events (`learned_hazard`): a Gamma-Poisson posterior mean, with the
spec's rate as the prior worth `PRIOR_HOURS` hours of observation
(docs/decisions/0003-learned-rates.md).

**Markets.** `resources.market`: `on-demand` (the default) prices every offer as today;
`interruptible` prices every offer that has a `min_bid` at its bid; `auto` prices each offer both
ways and keeps the cheaper expected total, so a ranking can mix markets (`cost.plan_job`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.jobspec import JobSpec, Market
from functions.domain.offer import Offer
from functions.domain.rates import posterior_rate_per_hour

OfferMarket = Literal["on-demand", "interruptible"]
HazardSource = Literal["spec", "learned"]

PRIOR_HOURS = 10.0  # how many hours of observation the spec's hazard is worth

MARKETS: dict[Market, tuple[OfferMarket, ...]] = {
    "on-demand": ("on-demand",),
    "interruptible": ("interruptible",),
    "auto": ("on-demand", "interruptible"),
}


class OutbidHazard(BaseModel):
    """Expected outbids per hour on an interruptible host, and where the rate comes from."""

    model_config = ConfigDict(frozen=True)

    per_hour: float
    source: HazardSource  # spec: resources.outbid_hazard_per_hour; learned: the job's outbids
    outbids: int = 0  # outbids the rate was learned from
    hours: float = 0.0  # hours on interruptible hosts the rate was learned from
    detail: str  # one line for people


class Bid(BaseModel):
    """How an offer is rented as interruptible: the bid placed and the outbids expected."""

    model_config = ConfigDict(frozen=True)

    usd_per_hour: float  # the bid a rent places: the GPU/machine part, $/h
    hazard: OutbidHazard

    def running_usd_per_hour(self, offer: Offer, disk_gb: float) -> float:
        """What the instance bills while it runs: the bid plus storage for `disk_gb`."""
        return self.usd_per_hour + offer.storage_usd_per_hour(disk_gb)


def bid_usd_per_hour(offer: Offer, margin: float) -> float | None:
    """`min_bid × (1 + margin)`, or None when the offer has no usable `min_bid`."""
    if offer.min_bid is None or not math.isfinite(offer.min_bid) or offer.min_bid <= 0:
        return None
    return offer.min_bid * (1 + margin)


def bid_for(job: JobSpec, offer: Offer, hazard: OutbidHazard) -> Bid | None:
    """The bid `job` would place on `offer`, or None when the offer cannot be rented as a bid."""
    price = bid_usd_per_hour(offer, job.resources.bid_margin)
    return None if price is None else Bid(usd_per_hour=price, hazard=hazard)


def markets(job: JobSpec) -> tuple[OfferMarket, ...]:
    """The markets each offer is priced in for `job` (auto: both, the cheaper kept)."""
    return MARKETS[job.resources.market]


def spec_hazard(job: JobSpec) -> OutbidHazard:
    """The spec's hazard, used until the job has run on interruptible hosts."""
    rate = job.resources.outbid_hazard_per_hour
    return OutbidHazard(
        per_hour=rate,
        source="spec",
        detail="from resources.outbid_hazard_per_hour; no outbids measured yet",
    )


def learned_hazard(
    prior_per_hour: float, outbids: int, hours: float, *, prior_hours: float = PRIOR_HOURS
) -> OutbidHazard:
    """The hazard after `outbids` outbid events in `hours` on interruptible hosts: the
    Gamma-Poisson posterior mean with `prior_per_hour` worth `prior_hours`
    (docs/decisions/0003-learned-rates.md).

    Nothing observed (0 outbids in 0 hours) gives the prior, as `source="spec"`."""
    numbers = (prior_per_hour, hours, prior_hours)
    if not all(math.isfinite(x) for x in numbers) or isinstance(outbids, bool):
        raise ValueError("hazard inputs must be finite numbers")
    if prior_per_hour < 0 or outbids < 0 or hours < 0 or prior_hours <= 0:
        raise ValueError(
            "prior_per_hour, outbids and hours must be ≥ 0 and prior_hours > 0, got "
            f"{prior_per_hour}, {outbids}, {hours}, {prior_hours}"
        )
    if outbids == 0 and hours == 0:
        return OutbidHazard(
            per_hour=prior_per_hour,
            source="spec",
            detail="the prior; no outbids measured yet",
        )
    rate = posterior_rate_per_hour(prior_per_hour, outbids, hours, prior_hours=prior_hours)
    return OutbidHazard(
        per_hour=rate,
        source="learned",
        outbids=outbids,
        hours=hours,
        detail=(
            f"learned: {outbids} outbid{'s' if outbids != 1 else ''} in {hours:.1f} h on "
            f"interruptible hosts, prior {prior_per_hour:g}/h worth {prior_hours:g} h"
        ),
    )


def job_hazard(job: JobSpec, *, outbids: int = 0, hours: float = 0.0) -> OutbidHazard:
    """The hazard for `job` after its own `outbids` in `hours` on interruptible hosts (the
    runtime counts them from its generations), with the spec's rate as the prior."""
    if outbids == 0 and hours == 0:
        return spec_hazard(job)
    return learned_hazard(job.resources.outbid_hazard_per_hour, outbids, hours)
