"""One monitor run, apart from Lambda: gather the facts, `reconcile` them, apply the decisions.

Order matters for safety, not for correctness: the pulse is written first (the heartbeat API
renews leases only while it is fresh), then spend and observations, then transitions, renewals
and the orphan sweep. Each action is idempotent and each job is handled on its own, so a run that
dies half way leaves nothing inconsistent and the next run finishes the work.

Vast records that cannot be read (an instance without a readable id, a charge without a readable
instance) are left out and counted, never fatal to the run: one warning per run names each with
its id and fields, and the report counts them (`VastRecordsSkipped`, `VastFieldsDropped`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.cloudflare import (
    CloudflareAccount,
    CloudflareClient,
    CloudflareError,
    mint_job_credentials,
)
from functions.adapters.factory import SecretNotSet
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.adapters.vast import RecordIssue, VastClient, VastError, describe_issues
from functions.domain.credentials import credentials_ttl_s
from functions.domain.job import Generation, Job, TimelineEvent
from functions.domain.measures import (
    WorkLost,
    budget_used_max_fraction,
    heartbeat_age_max_s,
    tether_instances,
    work_lost,
)
from functions.domain.reconcile import (
    InstanceFacts,
    JobDecision,
    JobSnapshot,
    SupervisionSettings,
    reconcile,
)
from functions.domain.spend import charges_by_instance
from functions.monitor import repair
from functions.observability import logger

SPEND_EPSILON_USD = 1e-6


@dataclass(frozen=True)
class MonitorDeps:
    store: JobStore
    transitions: TransitionStarter
    vast: Callable[[], VastClient]
    cloudflare: Callable[[], tuple[CloudflareClient, CloudflareAccount]]
    clock: Callable[[], float]
    settings: SupervisionSettings = field(default_factory=SupervisionSettings)
    r2_endpoint: str | None = None


@dataclass
class MonitorReport:
    """What one run did; `functions/monitor/metrics.py` turns it into metrics."""

    jobs: int = 0
    instances: int | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    transitions_started: int = 0
    transitions_retried: int = 0  # later attempts (and stops of given-up transitions) started
    transitions_exhausted: int = 0  # stops past their last attempt (the orphan sweep goes on)
    credentials_renewed: int = 0
    hosts_blamed: int = 0
    orphans_destroyed: int = 0
    errors: int = 0
    spend_usd: float = 0.0
    tether_instances: int | None = None  # labelled instances on Vast; None: list failed
    budget_used_max_fraction: float | None = None
    heartbeat_age_max_s: float | None = None
    work_lost_s: list[float] = field(default_factory=list)  # one per replace started
    vast_records_skipped: int = 0  # records Vast sent that could not be read: left out
    vast_fields_dropped: int = 0  # instance records kept without a field that could not be read


def run_monitor(deps: MonitorDeps) -> MonitorReport:
    now = deps.clock()
    report = MonitorReport()
    deps.store.write_pulse(now)
    jobs = deps.store.list_active_jobs()
    snapshots = [
        JobSnapshot(job=j, generations=tuple(deps.store.list_generations(j.job_id))) for j in jobs
    ]
    report.jobs = len(snapshots)
    issues: list[RecordIssue] = []
    instances = _list_instances(deps, issues)
    report.instances = None if instances is None else len(instances)
    report.tether_instances = None if instances is None else tether_instances(instances)
    report.heartbeat_age_max_s = heartbeat_age_max_s(snapshots, now)
    charges = _charges(deps, snapshots, issues) if instances is not None and snapshots else None
    _count_issues(issues, report)
    plan = reconcile(
        snapshots,
        instances,
        charges,
        now=now,
        settings=deps.settings,
        monitor_healthy=instances is not None,
    )
    report.budget_used_max_fraction = budget_used_max_fraction(
        (d.spend_usd, s.job.budget_usd) for d, s in zip(plan.decisions, snapshots, strict=True)
    )
    by_id = {s.job.job_id: s for s in snapshots}
    for decision in plan.decisions:
        try:
            _apply(deps, by_id[decision.job_id], decision, now, report)
        except Exception:  # one job's trouble must not stop the others; next run retries
            report.errors += 1
            logger.exception("monitor: job failed", extra={"job_id": decision.job_id})
    for orphan in plan.orphans:
        try:
            deps.vast().destroy_instance(orphan.instance_id)
        except VastError:
            report.errors += 1
            logger.exception("monitor: orphan destroy failed", extra={"id": orphan.instance_id})
            continue
        report.orphans_destroyed += 1
        logger.info(
            "orphan destroyed",
            extra={"instance_id": orphan.instance_id, "label": orphan.label, "why": orphan.reason},
        )
    return report


def _list_instances(deps: MonitorDeps, issues: list[RecordIssue]) -> list[InstanceFacts] | None:
    """The account's instances, all pages; None when Vast could not be read this run."""
    try:
        listed = deps.vast().list_instances()
    except (VastError, SecretNotSet) as exc:
        logger.warning("monitor: Vast instance list failed; no instance rule this run: %s", exc)
        return None
    issues.extend(listed.issues)
    return [
        InstanceFacts(
            id=i.id, label=i.label, actual_status=i.actual_status, start_date=i.start_date
        )
        for i in listed
    ]


def _charges(
    deps: MonitorDeps, snapshots: list[JobSnapshot], issues: list[RecordIssue]
) -> dict[int, float] | None:
    """Vast's own charges per instance, read from each item's `source`, best effort (spend
    falls back to our estimate)."""
    since = min((g.created_at for s in snapshots for g in s.generations), default=None)
    if since is None:
        return None
    try:
        listed = deps.vast().charges(since=since - 86_400)
    except (VastError, ValueError) as exc:
        logger.info("monitor: Vast charges unavailable: %s", exc)
        return None
    issues.extend(listed.issues)
    return charges_by_instance(listed)


def _count_issues(issues: list[RecordIssue], report: MonitorReport) -> None:
    """Count the records this run could not read, and name them all in one warning."""
    report.vast_records_skipped = sum(1 for i in issues if i.action == "skipped")
    report.vast_fields_dropped = sum(len(i.fields) for i in issues if i.action == "trimmed")
    if issues:
        logger.warning(
            "monitor: Vast records that could not be read: %s",
            describe_issues(issues),
            extra={
                "vast_records": [
                    {"kind": i.kind, "id": i.record_id, "fields": list(i.fields),
                     "action": i.action}
                    for i in issues
                ]
            },
        )  # fmt: skip


def _apply(
    deps: MonitorDeps,
    snapshot: JobSnapshot,
    decision: JobDecision,
    now: float,
    report: MonitorReport,
) -> None:
    job = snapshot.job
    report.spend_usd += decision.spend_usd
    if abs(decision.spend_usd - job.spent_usd) > SPEND_EPSILON_USD:
        deps.store.record_spend(job.job_id, decision.spend_usd)
    if decision.observation is not None and decision.generation is not None:
        deps.store.record_observation(job.job_id, decision.generation, decision.observation)
    if decision.verdict is not None:
        name = decision.verdict.health.value
        report.verdicts[name] = report.verdicts.get(name, 0) + 1
    if decision.blame is not None:
        blame = decision.blame
        deps.store.record_host_failure(
            blame.machine_id,
            failure=blame.failure,
            kind=blame.kind,
            now=now,
            avoid_until=blame.avoid_until,
        )
        report.hosts_blamed += 1
    if decision.transition is not None:
        outcome = repair.advance(deps.transitions, deps.store, decision.transition, now=now)
        report.transitions_retried += outcome.retried
        report.transitions_exhausted += outcome.status == "exhausted"
        if outcome.started_first_attempt:
            report.transitions_started += 1
            lost = None
            if decision.transition.action == "replace" and snapshot.current is not None:
                lost = _record_incident(deps, snapshot.current, decision, now, report)
            if decision.verdict is not None:
                message = f"{decision.transition.action}: {decision.transition.reason}"
                data: dict[str, Any] = {}
                if lost is not None:
                    message += f"; {_describe(lost)}"
                    data = {"work_lost_steps": lost.steps, "work_lost_s": lost.seconds}
                deps.store.append_event(
                    TimelineEvent(
                        job_id=job.job_id,
                        at=now,
                        kind=decision.verdict.health.value,
                        message=message,
                        data=data,
                    )
                )
    renew = decision.renew_credentials and decision.generation is not None
    if renew and _renew_credentials(deps, job, decision.generation or 0):
        report.credentials_renewed += 1


def _record_incident(
    deps: MonitorDeps,
    dying: Generation,
    decision: JobDecision,
    now: float,
    report: MonitorReport,
) -> WorkLost:
    """A replace was started: keep when and why on the job (the heartbeat API measures
    detection → training resumed from it) and measure the work the dying host lost."""
    assert decision.transition is not None
    deps.store.record_incident(
        decision.job_id, at=now, reason=decision.transition.reason, generation=dying.generation
    )
    lost = work_lost(dying)
    if lost.seconds is not None:
        report.work_lost_s.append(lost.seconds)
    return lost


def _describe(lost: WorkLost) -> str:
    if lost.steps == 0:
        return "no work lost since the last checkpoint"
    seconds = f" (≈ {lost.seconds:.0f} s of training)" if lost.seconds is not None else ""
    return f"{lost.steps} steps since the last checkpoint lost{seconds}"


def _renew_credentials(deps: MonitorDeps, job: Job, generation: int) -> bool:
    """Mint the generation's two keys afresh onto it; the agent gets them with its next
    heartbeat reply. A Cloudflare failure waits for the next run (they are renewed well
    before they expire)."""
    try:
        client, account = deps.cloudflare()
        credentials = mint_job_credentials(
            client,
            account,
            job.job_id,
            generation,
            ttl_s=credentials_ttl_s(job.spec.policy),
            lease_s=job.spec.policy.lease_window_s,
            endpoint=account.r2_endpoint(deps.r2_endpoint),
        )
    except (CloudflareError, SecretNotSet) as exc:
        logger.warning("monitor: credential renewal failed for %s: %s", job.job_id, exc)
        return False
    return deps.store.store_credentials(job.job_id, generation, credentials)


def report_fields(report: MonitorReport) -> dict[str, Any]:
    return {
        "jobs": report.jobs,
        "instances": report.instances,
        "verdicts": report.verdicts,
        "transitions_started": report.transitions_started,
        "transitions_retried": report.transitions_retried,
        "transitions_exhausted": report.transitions_exhausted,
        "credentials_renewed": report.credentials_renewed,
        "hosts_blamed": report.hosts_blamed,
        "orphans_destroyed": report.orphans_destroyed,
        "errors": report.errors,
        "tether_instances": report.tether_instances,
        "budget_used_max_fraction": report.budget_used_max_fraction,
        "heartbeat_age_max_s": report.heartbeat_age_max_s,
        "work_lost_s": report.work_lost_s,
        "vast_records_skipped": report.vast_records_skipped,
        "vast_fields_dropped": report.vast_fields_dropped,
    }
