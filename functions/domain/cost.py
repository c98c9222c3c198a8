"""Full-cost model and planner (docs/architecture.md#cost-model): what a job will really cost on
each Vast offer.

An hourly price hides most of what a short fine-tune costs on a marketplace host: the billed
start-up minutes (image pull, dependency install, model download at the host's measured speed),
per-GB traffic, and the work redone after an interruption. `plan_job` prices every qualifying
offer with all of it and ranks by the expected total.

For one offer, with `p` = GPU + storage $/h for the job's disk (`Offer.usd_per_hour`) and
`expected hours` = the job's hours on this offer (`functions.domain.speed`: `expected_hours` scaled
by the offer's speed against `reference_gpu`, or as given without one):

    start-up min     = fixed start-up (learned for the machine or GPU model, else
                       job.expected_startup_min, or the override: `functions/domain/pace.py`)
                       + download GB × 8000 / inet_down Mbit/s / 60
    compute $        = p × expected hours
    start-up $       = p × start-up hours
    download $       = download GB × inet_down_cost
    upload $         = checkpoints × upload GB per checkpoint × inet_up_cost,
                       checkpoints = ceil(expected minutes / checkpoint interval)
    interruption $   = expected restarts × (start-up $ + download $ + p × interval / 2)
    expected total $ = compute + start-up + download + upload + interruption

Reliability → failure rate. Vast's `reliability` (0..1) measures a host's uptime: the share of
time it was online and serving its rentals. We read it as availability A = MTBF / (MTBF + MTTR),
with a mean outage (MTTR) of one hour, the order of a reboot, a network drop or a host's
maintenance, and failures arriving at a constant rate (a Poisson process):

    MTBF = 1 h × A / (1 − A),   λ = 1 / MTBF,   expected restarts = λ × hours on the host

So 0.999 → MTBF ≈ 1000 h (6 weeks), 0.99 → 99 h, 0.95 → 19 h, 0.90 → 9 h: a 3-hour job on a
0.95 host is interrupted about one time in six, on a 0.999 host one time in 300, which is what
renters of marginal hosts report. Scores are clamped to [0.01, 0.9999], so no host is treated as
never failing. The one-hour outage is the model's only free constant (`MEAN_OUTAGE_H`).

Checkpoint interval (Young 1974 / Daly 2006): sqrt(2 × checkpoint cost × MTBF), where the
checkpoint cost is the time to upload one checkpoint at the host's measured upload speed (at least
one minute: saving, hashing and the marker take time too). It is capped so that losing one whole
interval costs less than one start-up (p × interval ≤ start-up $ + download $): past that point a
replacement host is cheaper than the work it would redo.

Interruptible (bid) hosts (`functions.domain.market`): with `resources.market` interruptible or
auto, an offer with a `min_bid` is also priced at q = bid + storage in place of `p`, with outbids
(hazard h per hour on the host) priced like restarts and the interval at the combined MTBF
1 / (λ + h); auto keeps the cheaper of the two prices per offer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable

from pydantic import BaseModel

from functions.domain.jobspec import JobSpec
from functions.domain.market import Bid, OfferMarket, OutbidHazard, bid_for, markets, spec_hazard
from functions.domain.offer import Offer
from functions.domain.speed import SpeedEstimate, StartupEstimate, prior_estimate, spec_startup

Estimator = Callable[[JobSpec, Offer], SpeedEstimate]
StartupEstimator = Callable[[JobSpec, Offer], StartupEstimate]

MEAN_OUTAGE_H = 1.0  # the MTTR that turns an uptime share into an MTBF
RELIABILITY_MIN = 0.01
RELIABILITY_MAX = 0.9999
MIN_CHECKPOINT_COST_MIN = 1.0  # saving + hashing + marker, even when the upload is instant
UNKNOWN_UPLOAD_MBPS = 10.0  # a record without a measured upload speed is assumed slow
MAX_CHECKPOINT_INTERVAL_MIN = 24 * 60.0  # the job spec's own upper bound
MBIT_PER_GB = 8000.0  # traffic is billed per decimal GB; inet_* speeds are Mbit/s

# Constraint names as the job spec spells them, so a user knows which field to relax.
C_GPU_NAME = "resources.gpu_names"
C_GPU_COUNT = "resources.gpu_count"
C_GPU_RAM = "resources.min_gpu_ram_gb"
C_DISK = "resources.min_disk_gb"
C_RELIABILITY = "resources.min_reliability"
C_DOWNLOAD = "resources.min_download_mbps"
C_MAX_PRICE = "resources.max_usd_per_hour"
C_RENTABLE = "rentable"
C_PRICE = "price"
C_BLOCKLIST = "blocklist"
C_MARKET = "resources.market"  # interruptible asked for, the offer has no min_bid


class CostBreakdown(BaseModel):
    compute_usd: float
    startup_usd: float
    download_usd: float
    upload_usd: float
    interruption_usd: float
    outbid_usd: float = 0.0  # interruptible: expected outbids × the cost of a restart

    @property
    def traffic_usd(self) -> float:
        return self.download_usd + self.upload_usd


class OfferCost(BaseModel):
    offer: Offer
    breakdown: CostBreakdown
    expected_total_usd: float
    startup_min: float
    usd_per_hour: float
    expected_restarts: float
    checkpoint_interval_min: float  # the interval the costs assume (the job's, or recommended)
    speed: SpeedEstimate  # the training hours the costs assume, and where they come from
    startup: StartupEstimate | None = None  # the fixed start-up minutes assumed, and where from
    market: OfferMarket = "on-demand"  # which kind of instance the costs assume
    bid_usd_per_hour: float | None = None  # interruptible: the bid a rent places (GPU $/h)
    expected_outbids: float = 0.0  # interruptible: hazard × hours on the host
    hazard: OutbidHazard | None = None  # interruptible: the outbid rate the costs assume
    other_market_total_usd: float | None = None  # auto: this offer's total in the other market

    @property
    def bid(self) -> Bid | None:
        """The bid these costs assume (None on demand)."""
        if self.bid_usd_per_hour is None or self.hazard is None:
            return None
        return Bid(usd_per_hour=self.bid_usd_per_hour, hazard=self.hazard)

    @property
    def expected_hours(self) -> float:
        return self.speed.hours


class Plan(BaseModel):
    ranking: list[OfferCost]  # qualifying offers, cheapest expected total first
    naive_choice: OfferCost | None  # cheapest $/h among qualifying: what a $/h sort would rent
    checkpoint_interval_min: float  # recommended for the top-ranked offer
    considered: int
    hazard: OutbidHazard | None = None  # the outbid rate used (None: on-demand only)


class NoQualifyingOffer(Exception):
    """No offer meets the job's constraints.

    `excluded` maps each constraint to how many offers fail it; an offer that fails several
    counts under each, so `worst` is the constraint whose relaxing opens the most offers.
    """

    def __init__(self, excluded: dict[str, int], considered: int) -> None:
        self.excluded = dict(sorted(excluded.items(), key=lambda kv: (-kv[1], kv[0])))
        self.considered = considered
        super().__init__(self.describe())

    @property
    def worst(self) -> tuple[str, int] | None:
        return next(iter(self.excluded.items()), None)

    def describe(self) -> str:
        if self.considered == 0:
            return "no offers to consider"
        worst = self.worst
        if worst is None:
            return f"none of {self.considered} offers qualifies"
        others = ", ".join(f"{name} {count}" for name, count in list(self.excluded.items())[1:])
        line = (
            f"none of {self.considered} offers qualifies; {worst[0]} excluded the most "
            f"({worst[1]} of {self.considered})"
        )
        return f"{line}; also {others}" if others else line


def failure_rate_per_hour(offer: Offer) -> float:
    """Expected interruptions per hour on this host (see the module docstring)."""
    uptime = min(max(offer.reliability_score, RELIABILITY_MIN), RELIABILITY_MAX)
    return (1 - uptime) / (uptime * MEAN_OUTAGE_H)


def mtbf_hours(offer: Offer, outbid_hazard_per_hour: float = 0.0) -> float:
    """Mean hours between interruptions: failures, plus outbids on an interruptible host."""
    return 1.0 / (failure_rate_per_hour(offer) + outbid_hazard_per_hour)


def download_minutes(gb: float, mbit_per_s: float) -> float:
    if gb <= 0:
        return 0.0
    return gb * MBIT_PER_GB / mbit_per_s / 60.0


def unmet_constraints(
    job: JobSpec, offer: Offer, *, blocklist: Collection[int] = (), bid: Bid | None = None
) -> list[str]:
    """Every constraint of `job` (plus availability and the blocklist) that `offer` fails;
    with `bid`, `max_usd_per_hour` is checked against what the bid instance bills."""
    res = job.resources
    unmet = []
    wanted = {name.lower() for name in res.gpu_names}
    if wanted and offer.gpu_name.lower() not in wanted:
        unmet.append(C_GPU_NAME)
    # Exactly the count: a training command is written for N GPUs; extra ones bill idle.
    if offer.num_gpus != res.gpu_count:
        unmet.append(C_GPU_COUNT)
    # Vast's own search takes GB × 1000 (a "24 GB" RTX 4090 reports 24564 MB, under 24 GiB).
    if offer.gpu_ram < res.min_gpu_ram_gb * 1000:
        unmet.append(C_GPU_RAM)
    if offer.disk_space < res.min_disk_gb:
        unmet.append(C_DISK)
    if offer.reliability_score < res.min_reliability:
        unmet.append(C_RELIABILITY)
    too_slow = offer.inet_down < res.min_download_mbps
    cannot_download = job.data.download_gb > 0 and offer.inet_down <= 0
    if too_slow or cannot_download:
        unmet.append(C_DOWNLOAD)
    if offer.rentable is False or offer.rented is True:
        unmet.append(C_RENTABLE)
    price = _usd_per_hour(job, offer, bid)
    if price <= 0:
        unmet.append(C_PRICE)  # a record without a price cannot be ranked
    elif res.max_usd_per_hour is not None and price > res.max_usd_per_hour:
        unmet.append(C_MAX_PRICE)
    if offer.machine_id is not None and offer.machine_id in blocklist:
        unmet.append(C_BLOCKLIST)
    return unmet


def startup_minutes(job: JobSpec, offer: Offer, *, startup_min: float | None = None) -> float:
    """Billed minutes before training starts: fixed start-up plus the download at this host."""
    fixed = job.expected_startup_min if startup_min is None else startup_min
    return fixed + download_minutes(job.data.download_gb, offer.inet_down)


def _usd_per_hour(job: JobSpec, offer: Offer, bid: Bid | None) -> float:
    """What the host bills while it runs: on demand `p`, interruptible bid + storage."""
    disk_gb = job.resources.min_disk_gb
    return offer.usd_per_hour(disk_gb) if bid is None else bid.running_usd_per_hour(offer, disk_gb)


def recommend_checkpoint_interval(
    job: JobSpec,
    offer: Offer,
    *,
    startup_min: float | None = None,
    bid: Bid | None = None,
    upload_min: float | None = None,
    failures_per_hour: float | None = None,
) -> float:
    """Young/Daly interval in minutes, capped so one lost interval costs less than a start-up.

    With `bid` (interruptible), outbids add to failures: the MTBF is 1 / (λ + hazard).
    `upload_min` (a measured upload time) replaces the size ÷ `inet_up` estimate and
    `failures_per_hour` (a measured rate blended with the prior) the reliability's rate;
    `functions.domain.checkpoint_interval` supplies both when a generation is rented."""
    price = _usd_per_hour(job, offer, bid)
    upload_mbps = offer.inet_up if offer.inet_up > 0 else UNKNOWN_UPLOAD_MBPS
    if upload_min is None:
        upload_min = download_minutes(job.data.upload_gb_per_checkpoint, upload_mbps)
    checkpoint_cost_min = max(MIN_CHECKPOINT_COST_MIN, upload_min)
    rate = failure_rate_per_hour(offer) if failures_per_hour is None else failures_per_hour
    hazard = 0.0 if bid is None else bid.hazard.per_hour
    # Never treat a host as surer than the most reliable score the prior accepts.
    mtbf_h = 1.0 / (max(rate, (1 - RELIABILITY_MAX) / (RELIABILITY_MAX * MEAN_OUTAGE_H)) + hazard)
    young_daly = math.sqrt(2 * checkpoint_cost_min * mtbf_h * 60)
    startup_usd = price * startup_minutes(job, offer, startup_min=startup_min) / 60
    download_usd = job.data.download_gb * offer.inet_down_cost
    cap = (startup_usd + download_usd) / price * 60 if price > 0 else young_daly
    interval = min(young_daly, cap, MAX_CHECKPOINT_INTERVAL_MIN)
    # Saving more often than a save takes would only stall training.
    return max(interval, checkpoint_cost_min)


def cost_offer(
    job: JobSpec,
    offer: Offer,
    *,
    startup_min: float | None = None,
    speed: SpeedEstimate | None = None,
    bid: Bid | None = None,
    startup: StartupEstimate | None = None,
) -> OfferCost:
    """Price `job` on `offer` (see the module docstring). Does not check constraints.

    `speed` gives the training hours on this offer; None: the prior from the offer's figures.
    `bid`: price it as an interruptible instance with this bid (`functions.domain.market`).
    `startup` gives the fixed start-up minutes (learned: `functions/domain/pace.py`); None: the
    spec's, or `startup_min`."""
    speed = prior_estimate(job, offer) if speed is None else speed
    startup = spec_startup(job, startup_min) if startup is None else startup
    startup_min = startup.minutes
    hours = speed.hours
    price = _usd_per_hour(job, offer, bid)
    start_min = startup_minutes(job, offer, startup_min=startup_min)
    interval = job.checkpoint.interval_min or recommend_checkpoint_interval(
        job, offer, startup_min=startup_min, bid=bid
    )
    checkpoints = math.ceil(hours * 60 / interval)

    compute_usd = price * hours
    startup_usd = price * start_min / 60
    download_usd = job.data.download_gb * offer.inet_down_cost
    upload_usd = checkpoints * job.data.upload_gb_per_checkpoint * offer.inet_up_cost
    restarts = failure_rate_per_hour(offer) * (hours + start_min / 60)
    outbids = 0.0 if bid is None else bid.hazard.per_hour * (hours + start_min / 60)
    # An outbid is priced as a replacement, like a failure (see functions.domain.market).
    per_restart_usd = startup_usd + download_usd + price * (interval / 2) / 60
    breakdown = CostBreakdown(
        compute_usd=compute_usd,
        startup_usd=startup_usd,
        download_usd=download_usd,
        upload_usd=upload_usd,
        interruption_usd=restarts * per_restart_usd,
        outbid_usd=outbids * per_restart_usd,
    )
    total = (
        breakdown.compute_usd
        + breakdown.startup_usd
        + breakdown.download_usd
        + breakdown.upload_usd
        + breakdown.interruption_usd
        + breakdown.outbid_usd
    )
    return OfferCost(
        offer=offer,
        breakdown=breakdown,
        expected_total_usd=total,
        startup_min=start_min,
        usd_per_hour=price,
        expected_restarts=restarts,
        checkpoint_interval_min=interval,
        speed=speed,
        market="on-demand" if bid is None else "interruptible",
        bid_usd_per_hour=None if bid is None else bid.usd_per_hour,
        expected_outbids=outbids,
        hazard=None if bid is None else bid.hazard,
        startup=startup,
    )


def plan_job(
    job: JobSpec,
    offers: Iterable[Offer],
    *,
    blocklist: Collection[int] = (),
    startup_min: float | None = None,
    estimate: Estimator = prior_estimate,
    hazard: OutbidHazard | None = None,
    estimate_startup: StartupEstimator | None = None,
) -> Plan:
    """Rank the offers that meet `job` by expected total $ (ties: lower $/h, then lower id).

    `blocklist` holds machine ids to avoid (hosts that died or hung on this job before).
    `estimate` gives the job's training hours on each offer (default: the prior from the offer's
    published speed; a measured pace can be passed in its place). `estimate_startup` gives the
    fixed start-up minutes on each offer (default: the spec's); `startup_min` overrides both.
    `hazard`: the outbid rate for interruptible offers (default: the spec's; a rate learned from
    the job's outbids, `market.job_hazard`, in its place). Each offer is priced in the markets
    `resources.market` names; with two (auto) the cheaper expected total is kept.
    Raises NoQualifyingOffer, with the count each constraint excluded, when none qualifies.
    """
    blocked = frozenset(blocklist)
    wanted = markets(job)
    if "interruptible" not in wanted:
        hazard = None
    elif hazard is None:
        hazard = spec_hazard(job)
    considered = 0
    excluded: dict[str, int] = {}
    costs: list[OfferCost] = []
    for offer in offers:
        considered += 1
        options, unmet = _market_options(job, offer, blocked, hazard)
        for name in unmet:
            excluded[name] = excluded.get(name, 0) + 1
        if options:
            speed = estimate(job, offer)
            learned = None
            if estimate_startup is not None and startup_min is None:
                learned = estimate_startup(job, offer)
            priced = [
                cost_offer(job, offer, startup_min=startup_min, speed=speed, startup=learned, bid=b)
                for b in options
            ]
            costs.append(_cheaper(priced))
    if not costs:
        raise NoQualifyingOffer(excluded, considered)

    ranking = sorted(costs, key=lambda c: (c.expected_total_usd, c.usd_per_hour, c.offer.id))
    naive = min(costs, key=lambda c: (c.usd_per_hour, c.offer.id))
    best = ranking[0]
    return Plan(
        ranking=ranking,
        naive_choice=naive,
        checkpoint_interval_min=recommend_checkpoint_interval(
            job,
            best.offer,
            startup_min=best.startup.minutes if best.startup else startup_min,
            bid=best.bid,
        ),
        considered=considered,
        hazard=hazard,
    )


def _market_options(
    job: JobSpec, offer: Offer, blocked: Collection[int], hazard: OutbidHazard | None
) -> tuple[list[Bid | None], list[str]]:
    """How `offer` may be rented for `job` (None: on demand, else the bid), and, when in no
    way, every constraint that stops it (each named once)."""
    options: list[Bid | None] = []
    unmet: list[str] = []
    for market in markets(job):
        bid = None if market == "on-demand" or hazard is None else bid_for(job, offer, hazard)
        reasons = unmet_constraints(job, offer, blocklist=blocked, bid=bid)
        if market == "interruptible" and bid is None:
            # No bid price: the on-demand price is not what this market would pay.
            reasons = [name for name in reasons if name != C_MAX_PRICE] + [C_MARKET]
        if not reasons:
            options.append(bid)
        unmet += [name for name in reasons if name not in unmet]
    return options, ([] if options else unmet)


def _cheaper(priced: list[OfferCost]) -> OfferCost:
    """The cheaper expected total (ties: on demand), noting the other market's total."""
    best = min(priced, key=lambda c: c.expected_total_usd)
    others = [c.expected_total_usd for c in priced if c is not best]
    return best.model_copy(update={"other_market_total_usd": others[0]}) if others else best
