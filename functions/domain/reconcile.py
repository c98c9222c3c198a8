"""The monitor's decision (pure, no I/O): `reconcile` the facts of one run into what to do.

The monitor (`functions/monitor/`) gathers facts — active jobs and their generations, the
account's Vast instances, Vast's charges, the clock — and `reconcile` turns them into decisions:
the spend of every job, the health verdict of every running generation
(`functions.domain.health.classify`), the lifecycle transition to start, whether to renew the
generation's storage credentials, which host to blame, and which labelled instances are orphans.

Everything here is deterministic in its inputs, so a monitor run that died half way and the run
after it reach the same decisions; every action they lead to is idempotent (deterministic
execution names, destroy of a destroyed instance, set-valued host failures).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import get_args

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.attempts import doomed_instance_reason, transition_under_way
from functions.domain.credentials import needs_new_credentials
from functions.domain.health import (
    HealthInput,
    HeartbeatView,
    InstanceView,
    VastStatus,
    Verdict,
    classify,
)
from functions.domain.job import Generation, Job, JobState, TransitionRequest
from functions.domain.labels import parse_label
from functions.domain.reasons import transition_reason
from functions.domain.spend import job_spend_usd, spend_of

_VAST_STATUSES = frozenset(get_args(VastStatus))
# States in which the lifecycle may be renting the next generation right now.
RENTING_STATES = frozenset({JobState.PENDING, JobState.PROVISIONING, JobState.REPLACING})


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
        "recorded yet. One interval, so orphans die within two (invariant 3). Also how long a "
        "STOPPING job's instances (a REPLACING job's old one) are left to its transition "
        "before the sweep destroys them.",
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
    under_way = transition_under_way(job)
    if under_way is not None:
        # Named every run: the repair (functions/monitor/repair.py) starts its next attempt
        # only when none was started, or the last one failed (functions/domain/attempts.py).
        return base.model_copy(update={"transition": under_way})
    if job.state != JobState.RUNNING or current is None or observation is None:
        return base
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
    generation's instance while the lifecycle is renting it (not recorded yet); but no
    instance of a job that has been STOPPING, nor of the generation a REPLACING job replaces,
    for longer than the grace. Instances younger than the grace are left for the next run: a
    rent lands in Vast's list before the lifecycle records it.
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
        if reason is None and snapshot is not None:
            # Its stop or replace should have destroyed it by now: money stops even while that
            # transition's executions keep failing (they are retried as new attempts).
            reason = doomed_instance_reason(
                snapshot.job, generation, now=now, grace_s=settings.orphan_grace_s
            )
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
