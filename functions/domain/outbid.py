"""Interruptible (bid) hosts at run time (issue 15, Deliver 4): the bid a rent places, what an
outbid instance looks like, whether to wait for it or replace it, and the job's outbid history.
Pure. The planner prices interruptible offers (`functions/domain/cost.py`); this is the rest.

**What an outbid looks like.** Vast stops an interruptible instance when a higher bid takes its
machine, and starts it again when it wins the machine back (shared/reference/vast-api.md). The
stop is the marketplace's, not the renter's: `actual_status` is `stopped` while
`intended_status` stays `running` (the renter still wants it to run, so it resumes by itself).
Every other stop is asked for, and sets `intended_status: stopped`: tether's own (the lifecycle
destroys rather than stops, but a user may stop one) and the agent's dead-man stop, which PUTs
`{"state": "stopped"}` with the container's key. So an outbid is: an interruptible generation
(or a record with `is_bid`), `stopped`, `intended_status: running`. Our reading of the docs; the
real records (shared/fixtures/vast/instances.json) show stops by request as `intended_status:
stopped` and no outbid record.

**Wait or replace** (`wait_or_replace`), a break-even rule (the ski-rental rule: waiting until
what it cost equals what replacing costs is never worse than twice the better choice in
hindsight, whatever the unknown wait turns out to be):
- replacing costs the new host's start-up (rent → first step) at its price, the start-up
  download, and `lost_work_usd`, the work a replacement redoes that the resumed host, whose disk
  Vast keeps, would not (the monitor passes 0: the agent uploads its last checkpoint when it is
  stopped, and both resume from the last checkpoint);
- waiting costs, per hour, the stopped instance's storage and the job's hour itself, valued at
  the price it trains at (an hour outbid is an hour the job is not done);
- so wait up to `replace_usd / (storage $/h + $/h)` hours, and never longer than the job's
  remaining work (no wait is worth more than the rest of the job), then replace.

**Back from an outbid.** When it wins its machine back, Vast starts it again: the container
restarts, onstart runs the agent of the same generation again on the kept disk. Until that
agent's first heartbeat, the last one is from before the stop (silent for the whole outbid, and
maybe reporting the exit the stop caused): `resumed_at` restarts the heartbeat and start-up
clocks at the status the instance came back with, and that old exit is no crash.

**Outbid counts.** Each stopped stretch of an outbid generation counts once (`outbid_since` is
the stretch's start); `outbid_history` sums them with the job's interruptible running hours, the
facts the planner's learned hazard rate is computed from.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.health import Health, OutbidView, Verdict
from functions.domain.job import Generation, Job
from functions.domain.spend import STOPPED, GenerationPrices, generation_prices, stopped_seconds
from functions.domain.supervision_facts import InstanceFacts, Observation


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- renting ---------------------------------------------------------------------------------


def bid_prices(prices: GenerationPrices, bid: float | None) -> GenerationPrices:
    """The generation's prices for a rent at `bid`: the GPU at the bid, storage and traffic as
    offered (Vast bills a bid instance at its bid while it runs)."""
    return prices if bid is None else prices.model_copy(update={"gpu_usd_per_hour": bid})


# --- seeing an outbid ------------------------------------------------------------------------


def is_outbid(instance: InstanceFacts | None, generation: Generation) -> bool:
    """Stopped by the marketplace: an interruptible instance `stopped` while Vast's
    `intended_status` is still `running` (a stop asked for sets it `stopped`)."""
    if instance is None or instance.actual_status != STOPPED:
        return False
    if instance.intended_status != "running":
        return False
    return generation.interruptible or instance.is_bid is True


class WaitOrReplace(_Frozen):
    replace_usd: float = Field(description="Start-up at the price, download and lost work.")
    wait_usd_per_hour: float = Field(description="Storage plus the job's hour at its price.")
    wait_s: float = Field(ge=0, description="Wait this long at most, then replace.")
    why: str


def wait_or_replace(
    *,
    usd_per_hour: float,
    storage_usd_per_hour: float,
    startup_min: float,
    download_usd: float,
    lost_work_usd: float = 0.0,
    remaining_hours: float | None = None,
) -> WaitOrReplace:
    """How long waiting for an outbid instance is worth it (the module docstring has the rule)."""
    replace_usd = max(0.0, usd_per_hour * startup_min / 60 + download_usd + lost_work_usd)
    rate = max(0.0, storage_usd_per_hour) + max(0.0, usd_per_hour)
    hours = replace_usd / rate if rate > 0 else 0.0
    why = (
        f"replacing costs ${replace_usd:.4f} (start-up {startup_min:g} min at "
        f"${usd_per_hour:.3f}/h + download ${download_usd:.4f} + lost work ${lost_work_usd:.4f}); "
        f"waiting ${rate:.3f}/h (storage + the job's hour)"
    )
    if remaining_hours is not None and remaining_hours < hours:
        hours = max(0.0, remaining_hours)
        why += f"; capped by the remaining work, {hours * 60:.1f} min"
    return WaitOrReplace(
        replace_usd=replace_usd, wait_usd_per_hour=rate, wait_s=hours * 3600, why=why
    )


def remaining_hours(job: Job, generations: Iterable[Generation], now: float) -> float:
    """The job's work left, roughly: `expected_hours` less the hours its generations trained."""
    trained_s = 0.0
    for g in generations:
        if g.training_started_at is None:
            continue
        end = g.ended_at or (g.heartbeat.at if g.heartbeat is not None else now)
        trained_s += max(0.0, end - g.training_started_at - g.stopped_s)
    return max(0.0, job.spec.expected_hours - trained_s / 3600)


def outbid_view(
    job: Job,
    current: Generation,
    instance: InstanceFacts | None,
    observation: Observation,
    generations: Iterable[Generation],
    now: float,
) -> OutbidView | None:
    """The health policy's view of an outbid current instance; None when it is not outbid."""
    if not is_outbid(instance, current):
        return None
    since = observation.observed_status_since
    prices = generation_prices(current)
    spec = job.spec
    rule = wait_or_replace(
        usd_per_hour=current.usd_per_hour,
        storage_usd_per_hour=prices.storage_usd_per_hour,
        startup_min=spec.expected_startup_min,
        download_usd=spec.data.download_gb * prices.inet_down_usd_per_gb,
        remaining_hours=remaining_hours(job, generations, now),
    )
    return OutbidView(
        for_s=max(0.0, now - since) if since is not None else 0.0,
        wait_s=rule.wait_s,
        why=rule.why,
    )


def resumed_at(observation: Observation) -> float | None:
    """When the instance came back from its last outbid (the start of the status it has shown
    since), or None: the health policy restarts the heartbeat and start-up clocks there."""
    since, counted = observation.observed_status_since, observation.outbid_since
    if counted is None or since is None or observation.observed_status == STOPPED:
        return None
    return since if since > counted else None


def count_outbid(observation: Observation, verdict: Verdict) -> Observation:
    """Count an outbid stretch once: the first run that judges it outbid."""
    since = observation.observed_status_since
    if verdict.health is not Health.OUTBID or since is None or observation.outbid_since == since:
        return observation
    return observation.model_copy(
        update={"outbids": observation.outbids + 1, "outbid_since": since}
    )


def newly_outbid(observation: Observation, before: Generation) -> bool:
    """This run counted a new outbid of the generation (tell it on the timeline)."""
    return observation.outbids > before.outbids


# --- history, for the planner's learned hazard -----------------------------------------------


class OutbidHistory(_Frozen):
    outbids: int = Field(ge=0, description="Outbid stretches seen on the job's generations.")
    interruptible_hours: float = Field(ge=0, description="Hours its bid instances ran.")


def outbid_history(generations: Iterable[Generation], now: float) -> OutbidHistory:
    """The job's outbids and the hours its interruptible instances ran (stopped time left out):
    the planner's learned hazard is outbids per such hour."""
    outbids, hours = 0, 0.0
    for g in generations:
        if not g.interruptible:
            continue
        outbids += g.outbids
        end = g.ended_at if g.ended_at is not None else now
        running_s = max(0.0, end - g.created_at - stopped_seconds(g, end))
        hours += running_s / 3600
    return OutbidHistory(outbids=outbids, interruptible_hours=hours)


__all__ = [
    "OutbidHistory",
    "WaitOrReplace",
    "bid_prices",
    "count_outbid",
    "is_outbid",
    "newly_outbid",
    "outbid_history",
    "outbid_view",
    "remaining_hours",
    "resumed_at",
    "wait_or_replace",
]
