"""What the monitor knows in one run, and how it carries a generation's clocks forward. Pure.

The facts `reconcile` (`functions/domain/reconcile.py`) decides from: the Vast instances as
listed (`InstanceFacts`), each active job with its generations (`JobSnapshot`), the monitor's
settings; and the clocks it keeps on a generation from run to run: progress (when the step last
advanced) and status (Vast's status since when, with the stopped seconds that spend bills at the
storage rate: `functions/domain/spend.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.job import Generation, Job
from functions.domain.spend import GONE, STOPPED


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceFacts(_Frozen):
    """What the Vast list says about one instance (adapter-free)."""

    id: int
    label: str | None = None
    actual_status: str | None = None
    status_msg: str | None = None
    start_date: float | None = None
    usd_per_hour: float | None = Field(default=None, description="Vast's dph_total.")
    intended_status: str | None = Field(
        default=None, description="running while outbid; stopped once stopped by request."
    )
    is_bid: bool | None = Field(default=None, description="An interruptible (bid) instance.")


class JobSnapshot(_Frozen):
    job: Job
    generations: tuple[Generation, ...] = ()

    @property
    def current(self) -> Generation | None:
        for generation in self.generations:
            if generation.generation == self.job.current_generation and generation.is_current:
                return generation
        return None


class SupervisionSettings(_Frozen):
    interval_s: float = Field(default=60, gt=0, description="How often the monitor runs.")
    charges_unread_runs_max: int = Field(
        default=10,
        ge=1,
        description="Consecutive runs without Vast's charges after which a job's lease is no "
        "longer renewed (its traffic is then only bounded, not known). 10 runs of 60 s: a "
        "charges outage of a few minutes (429 storms, a 502) passes, one of ten minutes stops "
        "renewing; at $0.052/GB on a 1 Gbit/s link ten minutes is ~$3.90 of traffic.",
    )
    orphan_grace_s: float = Field(
        default=60,
        ge=0,
        description="A labelled instance younger than this is left alone: its rent may not be "
        "recorded yet. One interval, so orphans die within two (invariant 3). Also how long a "
        "STOPPING job's instances (a REPLACING job's old one) are left to its transition "
        "before the sweep destroys them.",
    )


class StatusClock(_Frozen):
    """A generation's status clock: Vast's status since when, and the stopped seconds of the
    stretches already closed (spend bills those at the storage rate)."""

    observed_status: str | None = None
    observed_status_since: float | None = None
    stopped_s: float = 0.0


class Observation(_Frozen):
    """Per-run facts the monitor keeps on the current generation, to measure durations."""

    progress_step: int | None = None
    progress_at: float | None = None
    observed_status: str | None = None
    observed_status_since: float | None = None
    stopped_s: float = 0.0
    spend_usd: float = 0.0
    job_spent_usd: float = 0.0  # the whole job's: `Generation.job_spent_usd`
    vast_traffic_usd: float = 0.0  # Vast's bwd and bwu charges as last read
    charges_read_at: float | None = None  # when Vast's charges were last read
    traffic_bound_usd: float = 0.0  # the job's upper bound above `job_spent_usd` this run
    outbids: int = 0  # functions/domain/outbid.py counts them
    outbid_since: float | None = None
    move_checked_at: float | None = None  # functions/domain/move.py: judged once


def status_clock(
    generation: Generation, instance: InstanceFacts | None, *, listed: bool, now: float
) -> StatusClock:
    """Carry the status clock forward by one run: a new status starts a new stretch, and a
    stopped stretch that ends is added to `stopped_s`."""
    status, since = generation.observed_status, generation.observed_status_since
    stopped = generation.stopped_s
    if listed:
        seen = instance.actual_status if instance is not None else GONE
        if seen != status or since is None:
            if status == STOPPED and since is not None:
                stopped += max(0.0, now - since)
            status, since = seen, now
    return StatusClock(observed_status=status, observed_status_since=since, stopped_s=stopped)


def observe(
    generation: Generation, instance: InstanceFacts | None, *, listed: bool, now: float
) -> Observation:
    """Carry the progress and status clocks forward by one run."""
    step = generation.heartbeat.step if generation.heartbeat else None
    progress_step, progress_at = generation.progress_step, generation.progress_at
    if step is not None and (progress_step is None or step > progress_step):
        progress_step, progress_at = step, now
    clock = status_clock(generation, instance, listed=listed, now=now)
    return Observation(
        progress_step=progress_step,
        progress_at=progress_at,
        spend_usd=generation.spend_usd,
        job_spent_usd=generation.job_spent_usd,
        vast_traffic_usd=generation.vast_traffic_usd,
        charges_read_at=generation.charges_read_at,
        outbids=generation.outbids,
        outbid_since=generation.outbid_since,
        move_checked_at=generation.move_checked_at,
        **clock.model_dump(),
    )


def instance_start(instance: InstanceFacts, first_seen: Mapping[int, float], now: float) -> float:
    """When an instance began: Vast's start date, else its first sighting, else now."""
    if instance.start_date is not None:
        return instance.start_date
    return first_seen.get(instance.id, now)


__all__ = [
    "GONE",
    "InstanceFacts",
    "JobSnapshot",
    "Observation",
    "StatusClock",
    "SupervisionSettings",
    "instance_start",
    "observe",
    "status_clock",
]
