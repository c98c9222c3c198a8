"""Supervision decisions (pure, no I/O): what the monitor and the lifecycle do about each job.

The monitor (`functions/monitor/`) gathers facts — active jobs and their generations, the
account's Vast instances, Vast's charges, the clock — and `reconcile` turns them into decisions:
the spend of every job, the health verdict of every running generation
(`functions.domain.health.classify`), the lifecycle transition to start, whether to renew the
generation's storage credentials, which host to blame, and which labelled instances are orphans.
The lifecycle task function (`functions/lifecycle/`) uses the helpers at the bottom: the budget
check before a rent, the back-off while no offer qualifies, the blocklist for the planner.

Everything here is deterministic in its inputs, so a monitor run that died half way and the run
after it reach the same decisions; every action they lead to is idempotent (deterministic
execution names, destroy of a destroyed instance, set-valued host failures).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import get_args

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.cost import OfferCost
from functions.domain.health import (
    Health,
    HealthInput,
    HeartbeatView,
    InstanceView,
    VastStatus,
    Verdict,
    classify,
)
from functions.domain.job import (
    Generation,
    HostReputation,
    Job,
    JobState,
    StopReason,
    TransitionRequest,
)
from functions.domain.jobspec import Policy
from functions.domain.spend import (
    GenerationPrices,
    GenerationSpend,
    GenerationUsage,
    generation_spend,
    job_spend_usd,
)

LABEL_PREFIX = "tether"
_LABEL = re.compile(r"^tether:(?P<job>[A-Za-z0-9_-]{1,64}):g(?P<gen>[0-9]{1,6})$")
_VAST_STATUSES = frozenset(get_args(VastStatus))
# States in which the lifecycle may be renting the next generation right now.
RENTING_STATES = frozenset({JobState.PENDING, JobState.PROVISIONING, JobState.REPLACING})
CREDENTIALS_TTL_MARGIN_S = 3600  # credentials outlive the longest lease by this much
MAX_CREDENTIALS_TTL_S = 604_800  # Cloudflare's maximum (7 days)
MIN_CREDENTIALS_TTL_S = 900


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- labels ---------------------------------------------------------------------------------


def instance_label(job_id: str, generation: int) -> str:
    """`tether:<job_id>:g<generation>` (DESIGN §3): how the monitor knows whose host it is."""
    return f"{LABEL_PREFIX}:{job_id}:g{generation}"


def parse_label(label: str | None) -> tuple[str, int] | None:
    """(job id, generation) of a tether label; None for anything else (not ours)."""
    match = _LABEL.match(label or "")
    return (match["job"], int(match["gen"])) if match else None


# --- transition reasons ---------------------------------------------------------------------


def transition_reason(verdict: Verdict) -> str:
    """`<health>: <why>`: the lifecycle reads the health back with `reason_health`."""
    return f"{verdict.health.value}: {verdict.reason}"


def reason_health(reason: str) -> Health | None:
    head = reason.split(":", 1)[0].strip()
    try:
        return Health(head)
    except ValueError:
        return None


def stop_reason_for(reason: str) -> StopReason:
    """The terminal outcome a stop transition's reason asks for (cancel is the default)."""
    health = reason_health(reason)
    if health is Health.FINISHED:
        return "finished"
    if health is Health.FAILED:
        return "failed"
    if health is Health.OVER_BUDGET or reason.startswith("over_budget"):
        return "over_budget"
    return "cancelled"


# --- spend ----------------------------------------------------------------------------------


def prices_record(prices: GenerationPrices) -> dict[str, float]:
    """The prices as stored on the generation item (`Generation.prices`)."""
    return prices.model_dump()


def generation_prices(generation: Generation) -> GenerationPrices:
    """The stored prices; a generation without them is billed at its $/h, traffic free."""
    try:
        return GenerationPrices.model_validate(generation.prices)
    except ValueError:
        return GenerationPrices(gpu_usd_per_hour=generation.usd_per_hour, storage_usd_per_hour=0)


def spend_of(
    generation: Generation, now: float, *, vast_charged_usd: float | None = None
) -> GenerationSpend:
    """What one generation has cost by `now` (or by its end): $/h × seconds since the rent,
    plus the agent's traffic at the offer's prices; Vast's charges win when larger."""
    end = generation.ended_at if generation.ended_at is not None else now
    seconds = max(0.0, min(end, now) - generation.created_at)
    heartbeat = generation.heartbeat
    usage = GenerationUsage(
        running_s=seconds,
        existed_s=seconds,
        bytes_downloaded=heartbeat.bytes_downloaded if heartbeat else 0,
        bytes_uploaded=heartbeat.bytes_uploaded if heartbeat else 0,
    )
    return generation_spend(generation_prices(generation), usage, vast_charged_usd=vast_charged_usd)


def charges_by_instance(charges: Iterable[Mapping[str, object]]) -> dict[int, float]:
    """`GET /api/v0/charges/` rows → $ per instance id (rows without both are skipped)."""
    totals: dict[int, float] = {}
    for row in charges:
        metadata = row.get("metadata")
        instance_id = metadata.get("instance_id") if isinstance(metadata, Mapping) else None
        amount = row.get("amount")
        if isinstance(instance_id, int) and isinstance(amount, int | float):
            totals[instance_id] = totals.get(instance_id, 0.0) + float(amount)
    return totals


# --- credentials ----------------------------------------------------------------------------


def credentials_ttl_s(policy: Policy) -> int:
    """Storage credentials outlive the longest lease, so an agent whose lease runs out can
    still upload its last checkpoint."""
    ttl = policy.lease_window_s + CREDENTIALS_TTL_MARGIN_S
    return int(min(MAX_CREDENTIALS_TTL_S, max(MIN_CREDENTIALS_TTL_S, ttl)))


def needs_new_credentials(
    generation: Generation, policy: Policy, now: float, interval_s: float
) -> bool:
    """Renew once the credentials would no longer outlive a lease granted now (plus two monitor
    runs of slack, so one failed run never lets them lapse)."""
    if generation.credentials is None:
        return True
    remaining = generation.credentials.expires_at - now
    return remaining < policy.lease_window_s + 2 * interval_s


# --- the monitor's view ---------------------------------------------------------------------


class InstanceFacts(_Frozen):
    """What the Vast list says about one instance (adapter-free)."""

    id: int
    label: str | None = None
    actual_status: str | None = None
    start_date: float | None = None


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
    orphan_grace_s: float = Field(
        default=60,
        ge=0,
        description="A labelled instance younger than this is left alone: its rent may not be "
        "recorded yet. One interval, so orphans die within two (invariant 3).",
    )
    avoid_host_s: float = Field(
        default=7 * 86_400, ge=0, description="How long a host that killed a job is avoided."
    )


class HostBlame(_Frozen):
    machine_id: int
    failure: str = Field(description="`<job>:g<n>`: one failure, counted once.")
    kind: str = Field(description="dead or hung")
    avoid_until: float


class Observation(_Frozen):
    """Per-run facts the monitor keeps on the generation item, to measure durations."""

    progress_step: int | None = None
    progress_at: float | None = None
    observed_status: str | None = None
    observed_status_since: float | None = None
    spend_usd: float = 0.0


class JobDecision(_Frozen):
    job_id: str
    spend_usd: float
    verdict: Verdict | None = None
    transition: TransitionRequest | None = None
    renew_credentials: bool = False
    blame: HostBlame | None = None
    generation: int | None = Field(default=None, description="The generation judged.")
    observation: Observation | None = None


class Orphan(_Frozen):
    instance_id: int
    label: str
    reason: str


class MonitorPlan(_Frozen):
    decisions: tuple[JobDecision, ...]
    orphans: tuple[Orphan, ...]


def observe(
    generation: Generation, instance: InstanceFacts | None, *, listed: bool, now: float
) -> Observation:
    """Carry the progress and status clocks forward by one run."""
    step = generation.heartbeat.step if generation.heartbeat else None
    progress_step, progress_at = generation.progress_step, generation.progress_at
    if step is not None and (progress_step is None or step > progress_step):
        progress_step, progress_at = step, now
    status, since = generation.observed_status, generation.observed_status_since
    if listed:
        seen = instance.actual_status if instance is not None else "gone"
        if seen != status or since is None:
            status, since = seen, now
    return Observation(
        progress_step=progress_step,
        progress_at=progress_at,
        observed_status=status,
        observed_status_since=since,
        spend_usd=generation.spend_usd,
    )


def instance_view(
    instance: InstanceFacts | None, observation: Observation, *, listed: bool, now: float
) -> InstanceView:
    if not listed:
        return InstanceView(listed=False)
    if instance is None:
        return InstanceView(present=False)
    status = instance.actual_status if instance.actual_status in _VAST_STATUSES else None
    unknown_for = 0.0
    if status == "unknown" and observation.observed_status_since is not None:
        unknown_for = max(0.0, now - observation.observed_status_since)
    return InstanceView.model_validate({"actual_status": status, "unknown_for_s": unknown_for})


def heartbeat_view(generation: Generation) -> HeartbeatView | None:
    hb = generation.heartbeat
    if hb is None:
        return None
    return HeartbeatView(
        at=hb.at,
        phase=hb.phase,
        step=hb.step,
        gpu=hb.gpu,
        exit_code=hb.exit_code,
        last_checkpoint_step=hb.last_checkpoint.step if hb.last_checkpoint else None,
    )


def decide_job(
    snapshot: JobSnapshot,
    instances: Mapping[int, InstanceFacts] | None,
    charges: Mapping[int, float] | None,
    *,
    now: float,
    settings: SupervisionSettings,
    monitor_healthy: bool,
) -> JobDecision:
    """Spend, verdict and action for one active job."""
    job = snapshot.job
    listed = instances is not None
    current = snapshot.current
    spends = []
    observation = None
    for generation in snapshot.generations:
        charged = None
        if charges is not None and generation.instance_id is not None:
            charged = charges.get(generation.instance_id)
        spends.append(spend_of(generation, now, vast_charged_usd=charged))
    spend = job_spend_usd(spends)
    if current is not None:
        instance = None
        if instances is not None and current.instance_id is not None:
            instance = instances.get(current.instance_id)
        observation = observe(current, instance, listed=listed, now=now).model_copy(
            update={"spend_usd": spends[snapshot.generations.index(current)].total_usd}
        )
    base = JobDecision(
        job_id=job.job_id,
        spend_usd=spend,
        generation=current.generation if current else None,
        observation=observation,
    )
    if job.state == JobState.STOPPING:
        # Started again every run: repairs a stop whose start was lost (the name dedupes).
        stop = TransitionRequest(
            action="stop",
            job_id=job.job_id,
            generation=job.current_generation,
            reason=job.stop_reason or "cancelled",
        )
        return base.model_copy(update={"transition": stop})
    if job.state != JobState.RUNNING or current is None or observation is None:
        return base  # the lifecycle is renting; nothing to judge yet
    verdict = classify(
        HealthInput(
            now=now,
            policy=job.spec.policy,
            started_at=current.created_at,
            instance=instance_view(
                instances.get(current.instance_id or -1) if instances is not None else None,
                observation,
                listed=listed,
                now=now,
            ),
            heartbeat=heartbeat_view(current),
            progress_at=observation.progress_at,
            spend_usd=spend,
            budget_usd=job.budget_usd,
            usd_per_hour=current.usd_per_hour,
            monitor_interval_s=settings.interval_s,
            restarts_so_far=job.restarts,
        )
    )
    update: dict[str, object] = {"verdict": verdict}
    reason = transition_reason(verdict)
    if verdict.action == "replace":
        update["transition"] = TransitionRequest(
            action="replace", job_id=job.job_id, generation=current.generation + 1, reason=reason
        )
        if verdict.blames_host and current.machine_id is not None:
            update["blame"] = HostBlame(
                machine_id=current.machine_id,
                failure=f"{job.job_id}:g{current.generation}",
                kind=verdict.health.value,
                avoid_until=now + settings.avoid_host_s,
            )
    elif verdict.action == "stop":
        update["transition"] = TransitionRequest(
            action="stop", job_id=job.job_id, generation=current.generation, reason=reason
        )
    elif monitor_healthy:
        update["renew_credentials"] = needs_new_credentials(
            current, job.spec.policy, now, settings.interval_s
        )
    return base.model_copy(update=update)


def find_orphans(
    snapshots: Sequence[JobSnapshot],
    instances: Iterable[InstanceFacts],
    *,
    now: float,
    settings: SupervisionSettings,
) -> list[Orphan]:
    """Labelled instances that belong to no live generation (DESIGN §3, invariant 3).

    Live: the instance recorded for an active job's current generation, and the next
    generation's instance while the lifecycle is renting it (not recorded yet). Instances
    younger than the grace are left for the next run: a rent lands in Vast's list before the
    lifecycle records it.
    """
    by_job = {s.job.job_id: s for s in snapshots}
    orphans = []
    for instance in instances:
        parsed = parse_label(instance.label)
        if parsed is None:
            continue  # not a tether instance: never touched
        job_id, generation = parsed
        snapshot = by_job.get(job_id)
        reason = _orphan_reason(snapshot, instance, generation)
        if reason is None:
            continue
        age = now - instance.start_date if instance.start_date is not None else 0.0
        if age < settings.orphan_grace_s:
            continue
        orphans.append(Orphan(instance_id=instance.id, label=instance.label or "", reason=reason))
    return orphans


def _orphan_reason(
    snapshot: JobSnapshot | None, instance: InstanceFacts, generation: int
) -> str | None:
    if snapshot is None:
        return "its job has ended or does not exist"
    job = snapshot.job
    current = job.current_generation
    if generation == current:
        recorded = snapshot.current.instance_id if snapshot.current else None
        if recorded is not None and recorded != instance.id:
            return f"a second instance for generation {generation} (recorded: {recorded})"
        return None
    if generation == current + 1 and job.state in RENTING_STATES:
        return None
    if generation < current:
        return f"generation {generation} was replaced by {current}"
    return f"generation {generation} is not being provisioned (job {job.state.value})"


def reconcile(
    snapshots: Sequence[JobSnapshot],
    instances: Sequence[InstanceFacts] | None,
    charges: Mapping[int, float] | None,
    *,
    now: float,
    settings: SupervisionSettings,
    monitor_healthy: bool,
) -> MonitorPlan:
    """Every decision of one monitor run. `instances` None: the Vast list failed this run, so
    no instance rule applies and no orphan is swept (one bad reading never kills a job)."""
    by_id = {i.id: i for i in instances} if instances is not None else None
    decisions = tuple(
        decide_job(s, by_id, charges, now=now, settings=settings, monitor_healthy=monitor_healthy)
        for s in snapshots
    )
    orphans = (
        tuple(find_orphans(snapshots, instances, now=now, settings=settings))
        if instances is not None
        else ()
    )
    return MonitorPlan(decisions=decisions, orphans=orphans)


# --- the lifecycle's decisions --------------------------------------------------------------

CAPACITY_FIRST_WAIT_S = 60
CAPACITY_MAX_WAIT_S = 600


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


def blocklist(
    generations: Iterable[Generation],
    reputations: Mapping[int, HostReputation],
    *,
    now: float,
) -> set[int]:
    """Machines the planner must skip: those this job died or hung on, and any machine whose
    reputation says to avoid it still."""
    blocked = {g.machine_id for g in generations if g.host_blamed and g.machine_id is not None}
    blocked |= {m for m, rep in reputations.items() if rep.avoid_until > now}
    return blocked
