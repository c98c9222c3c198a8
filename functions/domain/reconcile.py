"""The monitor's decision (pure, no I/O): `reconcile` the facts of one run into what to do.

The monitor (`functions/monitor/`) gathers facts — active jobs and their generations, the
account's Vast instances, Vast's charges, the clock — and `reconcile` turns them into decisions:
the spend of every job, the health verdict of every running generation
(`functions.domain.health.classify`), the lifecycle transition to start, whether to renew the
generation's storage credentials, which host to blame, and which labelled instances are orphans.

`decide_job` decides one job alone, so the monitor can evaluate each job on its own and a job
whose facts cannot be read stops no other; `hold_correlated_loss` then looks across the jobs
(`functions/domain/correlated.py`), and `find_orphans` across the instances.

- **Budget in every active state.** Over budget is judged for every active job, renting ones
  (PENDING, PROVISIONING, REPLACING) included: a replacement stuck for hours while the old host
  bills is stopped like a running job, and that stop takes precedence over the provision or
  replace the job is in the middle of. Health is judged where there is a host to judge: the
  current generation of a RUNNING job.
- **Transitions under way are named every run.** A job in the middle of one (PENDING,
  PROVISIONING, REPLACING, STOPPING) gets the transition it waits for
  (`functions.domain.attempts.transition_under_way`); the monitor's repair starts its next
  attempt only if the last one closed unfinished (`functions/monitor/repair.py`). The orphan
  sweep destroys a stuck STOPPING job's instances, and a stuck REPLACING job's old one
  (`functions/domain/orphans.py`).
- **Spend only moves up.** A job's spend is never below what is stored (`known_spend_usd`: the
  job item's `spent_usd`, refreshed in steps, or the figure the last run kept on a generation):
  a run that could not read Vast's charges must not lower what an earlier run measured (and the
  store writes both conditionally too, for overlapping runs).
- **Every instance is counted**, recorded or not (`functions/domain/spend.py`).
- **Ages without a start date.** An instance Vast lists without a `start_date` is as old as its
  first sighting (`first_seen`, kept by the monitor): an orphan without one is still swept.

Everything here is deterministic in its inputs, so a monitor run that died half way and the run
after it reach the same decisions; every action they lead to is idempotent (deterministic
execution names, destroy of a destroyed instance, set-valued host failures).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import get_args

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.attempts import transition_under_way
from functions.domain.correlated import Watch, correlated, held, watch
from functions.domain.crashes import crashes_without_progress_before, reported_progress
from functions.domain.credentials import needs_new_credentials
from functions.domain.health import (
    Health,
    HealthInput,
    HeartbeatView,
    InstanceView,
    VastStatus,
    Verdict,
    classify,
    over_budget,
)
from functions.domain.job import (
    Generation,
    Job,
    JobState,
    TransitionRequest,
    UnrecordedInstance,
    known_spend_usd,
)
from functions.domain.move import MoveCheck
from functions.domain.orphans import (
    RENTING_STATES,
    Orphan,
    find_orphans,
    labelled_by_job,
    unseen_starts,
)
from functions.domain.outbid import count_outbid, outbid_view, resumed_at
from functions.domain.reasons import transition_reason
from functions.domain.spend import (
    GONE,
    STOPPED,
    ChargesRead,
    GenerationSpend,
    VastCharges,
    charged_only,
    charges_unread_s,
    generation_prices,
    job_spend_usd,
    link_usd_per_hour,
    spend_of,
    unrecorded_spend,
)
from functions.domain.supervision_facts import (
    InstanceFacts,
    JobSnapshot,
    Observation,
    StatusClock,
    SupervisionSettings,
    instance_start,
    observe,
    status_clock,
)

_VAST_STATUSES = frozenset(get_args(VastStatus))
REPLACEMENT_CAUSES = (Health.DEAD, Health.HUNG)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HostBlame(_Frozen):
    machine_id: int
    failure: str = Field(description="`<job>:g<n>`: one failure, counted once.")
    kind: str = Field(description="dead or hung")


class GenerationClock(_Frozen):
    """A changed status clock of a generation that is not current (replaced, not yet ended)."""

    generation: int
    clock: StatusClock


class JobDecision(_Frozen):
    job_id: str
    spend_usd: float
    spend_upper_usd: float = Field(
        default=0.0,
        description="The most the job can have cost: `spend_usd` plus the traffic Vast can "
        "have billed while its charges were unread (the budget rule judges this).",
    )
    renew_lease: bool = Field(
        default=True,
        description="False once Vast's charges went unread for `charges_unread_runs_max` "
        "runs: the run is recorded, but `supervised_at` is not refreshed.",
    )
    verdict: Verdict | None = None
    transition: TransitionRequest | None = None
    renew_credentials: bool = False
    blame: HostBlame | None = None
    generation: int | None = Field(default=None, description="The generation judged.")
    observation: Observation | None = None
    replaced_for: str | None = Field(
        default=None, description="The cause to record on `generation` before replacing it."
    )
    clocks: tuple[GenerationClock, ...] = ()
    sightings: tuple[UnrecordedInstance, ...] = Field(
        default=(), description="Instances of the job that no generation records, seen now."
    )
    watch: Watch = Field(default_factory=Watch)
    held: bool = Field(default=False, description="A dead verdict held: correlated loss.")


class MonitorPlan(_Frozen):
    decisions: tuple[JobDecision, ...]
    orphans: tuple[Orphan, ...]
    first_sightings: tuple[int, ...] = Field(
        default=(), description="Labelled instances without a start date, first seen now."
    )
    held: int = Field(default=0, description="Dead verdicts held (correlated loss).")


# --- clocks ---------------------------------------------------------------------------------


def _clock_of(generation: Generation) -> StatusClock:
    return StatusClock(
        observed_status=generation.observed_status,
        observed_status_since=generation.observed_status_since,
        stopped_s=generation.stopped_s,
    )


def _billing(generation: Generation) -> bool:
    """Vast bills the generation's instance (traffic included) now."""
    return (
        generation.ended_at is None
        and generation.instance_id is not None
        and generation.observed_status != GONE
    )


def billing_usd_per_hour(generation: Generation) -> float:
    """What a generation's instance costs per hour now, by its status clock: nothing once gone
    or ended, storage only while stopped."""
    if generation.ended_at is not None or generation.instance_id is None:
        return 0.0
    if generation.observed_status == GONE:
        return 0.0
    if generation.observed_status == STOPPED:
        return generation_prices(generation).storage_usd_per_hour
    return generation.usd_per_hour


# --- views for the health policy ------------------------------------------------------------


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
    return InstanceView.model_validate(
        {"actual_status": status, "unknown_for_s": unknown_for, "status_msg": instance.status_msg}
    )


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
        outputs_recorded=hb.outputs is not None,
        exit_output=hb.exit_output,
        progressed=reported_progress(generation),
    )


def replacements(generations: Iterable[Generation]) -> dict[Health, int]:
    """Replacements so far per capped cause: the replaced generations that record it."""
    counts = dict.fromkeys(REPLACEMENT_CAUSES, 0)
    for g in generations:
        if not g.is_current and g.replaced_for in {c.value for c in REPLACEMENT_CAUSES}:
            cause = Health(g.replaced_for)
            counts[cause] += 1
    return counts


# --- one job --------------------------------------------------------------------------------


def _sightings(
    job: Job,
    labelled: Sequence[InstanceFacts],
    recorded: set[int],
    first_seen: Mapping[int, float],
    now: float,
) -> tuple[UnrecordedInstance, ...]:
    """This job's labelled instances that no generation records, as seen now."""
    found = []
    for instance in labelled:
        if instance.id in recorded:
            continue
        known = job.unrecorded_instances.get(str(instance.id))
        start = instance.start_date
        if start is None:
            start = known.start if known is not None else first_seen.get(instance.id, now)
        price = instance.usd_per_hour
        if price is None:
            price = known.usd_per_hour if known is not None else 0.0
        found.append(
            UnrecordedInstance(
                instance_id=instance.id, start=start, last_seen=now, usd_per_hour=max(price, 0.0)
            )
        )
    return tuple(found)


def _unrecorded_spends(
    job: Job,
    sightings: Sequence[UnrecordedInstance],
    recorded: set[int],
    charges: VastCharges | None,
) -> list[GenerationSpend]:
    """What instances no generation records have cost: those the monitor saw, and those only
    Vast's charges know (rented and destroyed between two runs, e.g. a rent that lost its
    race)."""
    seen = {str(s.instance_id): s for s in sightings}
    merged = {**job.unrecorded_instances, **seen}
    amounts = charges.amounts if charges is not None else {}
    spends = [
        unrecorded_spend(u, vast_charged_usd=amounts.get(u.instance_id))
        for u in merged.values()
        if u.instance_id not in recorded
    ]
    charged = charges.by_job.get(job.job_id, ()) if charges is not None else ()
    for instance_id in charged:
        if instance_id in recorded or str(instance_id) in merged:
            continue
        spends.append(charged_only(amounts.get(instance_id, 0.0)))
    return spends


def with_charges(generation: Generation, charges: ChargesRead, now: float) -> Generation:
    """The generation as this run's charges read leaves it: the traffic Vast billed its
    instance (never lowered) and when that was read; unchanged while they are unread."""
    if not isinstance(charges, VastCharges) or generation.instance_id is None:
        return generation
    traffic = max(generation.vast_traffic_usd, charges.traffic.get(generation.instance_id, 0.0))
    return generation.model_copy(update={"vast_traffic_usd": traffic, "charges_read_at": now})


def lease_renewable(
    generations: Iterable[Generation], now: float, settings: SupervisionSettings
) -> bool:
    """Whether a live generation's traffic has gone unknown (Vast's charges unread) for less
    than `charges_unread_runs_max` runs: past that its lease is not renewed."""
    limit_s = settings.charges_unread_runs_max * settings.interval_s
    return all(
        charges_unread_s(g, now) < limit_s
        for g in generations
        if g.ended_at is None and g.instance_id is not None
    )


def decide_job(
    snapshot: JobSnapshot,
    instances: Mapping[int, InstanceFacts] | None,
    charges: ChargesRead,
    *,
    now: float,
    settings: SupervisionSettings,
    labelled: Sequence[InstanceFacts] = (),
    first_seen: Mapping[int, float] | None = None,
    move: MoveCheck | None = None,
) -> JobDecision:
    """Spend, verdict and action for one active job. `labelled`: the listed instances whose
    label names this job. `move`: this run's judgement of moving its current generation to a
    cheaper host (`functions/domain/move.py`), when one was made: a healthy generation it says
    to move is replaced as `overpriced`, and the generation is marked judged either way."""
    job = snapshot.job
    listed = instances is not None
    current = snapshot.current
    seen_first = first_seen or {}
    recorded = {g.instance_id for g in snapshot.generations if g.instance_id is not None}
    spends: list[GenerationSpend] = []
    clocks: list[GenerationClock] = []
    billed: list[Generation] = []
    observation = None
    instance = None
    current_spend = 0.0
    read = charges if isinstance(charges, VastCharges) else None
    for g in snapshot.generations:
        found = None
        if instances is not None and g.instance_id is not None:
            found = instances.get(g.instance_id)
        now_g = with_charges(g, charges, now)
        if g.ended_at is None and g.instance_id is not None:
            clock = status_clock(g, found, listed=listed, now=now)
            now_g = now_g.model_copy(update=clock.model_dump())
            if g is not current and clock != _clock_of(g):
                clocks.append(GenerationClock(generation=g.generation, clock=clock))
        charged = None
        if read is not None and g.instance_id is not None:
            charged = read.amounts.get(g.instance_id)
        cost = spend_of(now_g, now, vast_charged_usd=charged, charges_read=read is not None)
        spends.append(cost)
        billed.append(now_g)
        if g is current:
            instance = found
            current_spend = cost.total_usd
            current_now = now_g
    sightings = _sightings(job, labelled, recorded, seen_first, now)
    spends.extend(_unrecorded_spends(job, sightings, recorded, read))
    spend = max(known_spend_usd(job, snapshot.generations), job_spend_usd(spends))
    # Charges unread: what the job's traffic can have added since they were last read.
    bound = math.fsum(s.traffic_bound_usd for s in spends)
    upper = spend + bound
    price = sum(billing_usd_per_hour(g) for g in billed) + sum(s.usd_per_hour for s in sightings)
    if read is None:  # the next interval's traffic is as unknown as the last one's
        price += sum(link_usd_per_hour(generation_prices(g)) for g in billed if _billing(g))
    if current is not None and current_now is not None:
        observation = observe(current, instance, listed=listed, now=now).model_copy(
            update={
                "spend_usd": current_spend, "job_spent_usd": spend,
                "vast_traffic_usd": current_now.vast_traffic_usd,
                "charges_read_at": current_now.charges_read_at, "traffic_bound_usd": bound,
            }
        )  # fmt: skip
    base = JobDecision(
        job_id=job.job_id,
        spend_usd=spend,
        spend_upper_usd=upper,
        renew_lease=lease_renewable(billed, now, settings),
        generation=current.generation if current else None,
        observation=observation,
        clocks=tuple(clocks),
        sightings=sightings,
    )
    if job.state == JobState.STOPPING:
        # Named every run: the repair (functions/monitor/repair.py) starts its next attempt
        # only when none was started, or the last one failed (functions/domain/attempts.py).
        return base.model_copy(update={"transition": transition_under_way(job)})
    if job.state != JobState.RUNNING or current is None or observation is None:
        # Over budget first: its stop takes precedence over the provision or replace the job
        # is in the middle of (whose next attempt would rent again).
        stopped = _budget_only(base, job, upper, price, settings)
        if stopped.transition is not None:
            return stopped
        return base.model_copy(update={"transition": transition_under_way(job)})
    view = instance_view(instance, observation, listed=listed, now=now)
    heartbeat = heartbeat_view(current)
    verdict = classify(
        HealthInput(
            now=now,
            policy=job.spec.policy,
            started_at=current.created_at,
            instance=view,
            heartbeat=heartbeat,
            progress_at=observation.progress_at,
            training_started_at=current.training_started_at,
            gpu_busy_at=current.gpu_busy_at,
            spend_usd=upper,
            spend_is_upper_bound=bound > 0,
            budget_usd=job.budget_usd,
            usd_per_hour=max(price, current.usd_per_hour),
            monitor_interval_s=settings.interval_s,
            restarts_so_far=job.restarts,
            outputs_required=job.spec.outputs is not None,
            replacements=replacements(snapshot.generations),
            crashes_without_progress_before=crashes_without_progress_before(
                snapshot.generations, current
            ),
            outbid=outbid_view(job, current, instance, observation, snapshot.generations, now),
            resumed_at=resumed_at(observation),
        )
    )
    observation = count_outbid(observation, verdict)
    if move is not None and verdict.health is Health.HEALTHY:
        observation = observation.model_copy(update={"move_checked_at": now})
        if move.move:
            verdict = Verdict(health=Health.OVERPRICED, reason=move.reason)
    update: dict[str, object] = {
        "verdict": verdict,
        "observation": observation,
        "watch": watch(heartbeat, view, job.spec.policy, now),
    }
    reason = transition_reason(verdict)
    if verdict.blames_host and current.machine_id is not None:
        update["blame"] = HostBlame(
            machine_id=current.machine_id,
            failure=f"{job.job_id}:g{current.generation}",
            kind=(verdict.cause or verdict.health).value,
        )
    if verdict.action == "replace":
        update["transition"] = TransitionRequest(
            action="replace", job_id=job.job_id, generation=current.generation + 1, reason=reason
        )
        update["replaced_for"] = verdict.health.value
    elif verdict.action == "stop":
        update["transition"] = TransitionRequest(
            action="stop", job_id=job.job_id, generation=current.generation, reason=reason
        )
    else:  # the host is judged alive (by Vast, or by its heartbeats when Vast is unreadable)
        update["renew_credentials"] = needs_new_credentials(
            current, job.spec.policy, now, settings.interval_s
        )
    return base.model_copy(update=update)


def _budget_only(
    base: JobDecision, job: Job, spend: float, price: float, settings: SupervisionSettings
) -> JobDecision:
    """A job the lifecycle is renting for (or without a current host): only the budget rule
    applies, on what its instances still bill."""
    why = over_budget(spend, job.budget_usd, price, settings.interval_s)
    if why is None:
        return base
    if spend > base.spend_usd:
        why = f"{why} (an upper bound: Vast's charges unread)"
    verdict = Verdict(health=Health.OVER_BUDGET, reason=f"{why} (job {job.state.value})")
    stop = TransitionRequest(
        action="stop",
        job_id=job.job_id,
        generation=job.current_generation,
        reason=transition_reason(verdict),
    )
    return base.model_copy(update={"verdict": verdict, "transition": stop})


# --- across jobs ----------------------------------------------------------------------------


def hold_correlated_loss(decisions: Sequence[JobDecision]) -> tuple[list[JobDecision], int]:
    """When heartbeats were lost together (`functions/domain/correlated.py`), hold the dead
    verdicts of the silent jobs: no replace, no blame, no cap used. Returns the decisions and
    how many were held."""
    if not correlated([d.watch for d in decisions]):
        return list(decisions), 0
    out: list[JobDecision] = []
    count = 0
    for d in decisions:
        verdict = d.verdict
        if d.watch.silent and verdict is not None and held(verdict.health, verdict.cause):
            d = d.model_copy(
                update={
                    "transition": None,
                    "blame": None,
                    "replaced_for": None,
                    "renew_credentials": False,
                    "held": True,
                }
            )
            count += 1
        out.append(d)
    return out, count


def reconcile(
    snapshots: Sequence[JobSnapshot],
    instances: Sequence[InstanceFacts] | None,
    charges: ChargesRead,
    *,
    now: float,
    settings: SupervisionSettings,
    first_seen: Mapping[int, float] | None = None,
) -> MonitorPlan:
    """Every decision of one monitor run. `instances` None: the Vast list failed this run, so
    no instance rule applies and no orphan is swept (one bad reading never kills a job)."""
    by_id = {i.id: i for i in instances} if instances is not None else None
    by_job = labelled_by_job(instances or ())
    decided = []
    for snapshot in snapshots:
        decided.append(
            decide_job(
                snapshot,
                by_id,
                charges,
                now=now,
                settings=settings,
                labelled=by_job.get(snapshot.job.job_id, ()),
                first_seen=first_seen,
            )
        )
    decisions, held_count = hold_correlated_loss(decided)
    orphans: tuple[Orphan, ...] = ()
    unseen: tuple[int, ...] = ()
    if instances is not None:
        orphans = tuple(
            find_orphans(snapshots, instances, now=now, settings=settings, first_seen=first_seen)
        )
        unseen = unseen_starts(instances, first_seen or {})
    return MonitorPlan(
        decisions=tuple(decisions), orphans=orphans, first_sightings=unseen, held=held_count
    )


__all__ = [
    "RENTING_STATES",
    "GenerationClock",
    "HostBlame",
    "InstanceFacts",
    "JobDecision",
    "JobSnapshot",
    "MonitorPlan",
    "Observation",
    "Orphan",
    "StatusClock",
    "SupervisionSettings",
    "decide_job",
    "find_orphans",
    "hold_correlated_loss",
    "instance_start",
    "labelled_by_job",
    "observe",
    "reconcile",
    "status_clock",
    "unseen_starts",
]
