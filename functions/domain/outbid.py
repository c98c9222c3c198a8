"""Interruptible (bid) hosts at run time: the bid a rent places, what an outbid instance looks
like, whether to wait for it or replace it, and the job's outbid history. Pure. The planner
prices interruptible offers (`functions/domain/cost.py`); this is the rest.

An outbid is an interruptible generation (or a record with `is_bid`) that is `stopped` while
Vast's `intended_status` stays `running`: every stop that was asked for (tether's, the user's,
the agent's dead-man stop) sets `intended_status: stopped`. `wait_or_replace` waits while
waiting has cost less than replacing would, never longer than the job's remaining work, then
replaces (a ski-rental rule). Back from an outbid, the heartbeat and start-up clocks restart
(`resumed_at`) and the exit the stop caused is no crash; each stopped stretch counts once
(`outbid_since`), and `outbid_history` gives the planner's learned hazard its facts. The
reasoning: docs/decisions/0002-outbid-wait-or-replace.md.
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
    """How long waiting for an outbid instance is worth it: the break-even rule of
    docs/decisions/0002-outbid-wait-or-replace.md."""
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
