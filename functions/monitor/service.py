"""One monitor run, apart from Lambda: gather the facts, `reconcile` them, apply the decisions.

Order matters for safety, not for correctness: the pulse is written first (the heartbeat API
renews leases only while it is fresh), then spend and observations, then transitions, renewals
and the orphan sweep. Each action is idempotent and each job is handled on its own, so a run that
dies half way leaves nothing inconsistent and the next run finishes the work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.cloudflare import CloudflareClient, CloudflareError
from functions.adapters.factory import CloudflareAccount, SecretNotSet
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.adapters.vast import VastClient, VastError
from functions.domain.heartbeat import StorageCredentials
from functions.domain.job import Job, TimelineEvent
from functions.domain.supervision import (
    InstanceFacts,
    JobDecision,
    JobSnapshot,
    SupervisionSettings,
    charges_by_instance,
    credentials_ttl_s,
    reconcile,
)
from functions.observability import logger

SPEND_EPSILON_USD = 1e-6


@dataclass
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
    """What one run did; the handler turns it into metrics."""

    jobs: int = 0
    instances: int | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    transitions_started: int = 0
    credentials_renewed: int = 0
    hosts_blamed: int = 0
    orphans_destroyed: int = 0
    errors: int = 0
    spend_usd: float = 0.0


def run_monitor(deps: MonitorDeps) -> MonitorReport:
    now = deps.clock()
    report = MonitorReport()
    deps.store.write_pulse(now)
    jobs = deps.store.list_active_jobs()
    snapshots = [
        JobSnapshot(job=j, generations=tuple(deps.store.list_generations(j.job_id))) for j in jobs
    ]
    report.jobs = len(snapshots)
    instances = _list_instances(deps)
    report.instances = None if instances is None else len(instances)
    charges = _charges(deps, snapshots) if instances is not None and snapshots else None
    plan = reconcile(
        snapshots,
        instances,
        charges,
        now=now,
        settings=deps.settings,
        monitor_healthy=instances is not None,
    )
    jobs_by_id = {s.job.job_id: s.job for s in snapshots}
    for decision in plan.decisions:
        try:
            _apply(deps, jobs_by_id[decision.job_id], decision, now, report)
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


def _list_instances(deps: MonitorDeps) -> list[InstanceFacts] | None:
    """The account's instances, all pages; None when Vast could not be read this run."""
    try:
        listed = deps.vast().list_instances()
    except (VastError, SecretNotSet) as exc:
        logger.warning("monitor: Vast instance list failed; no instance rule this run: %s", exc)
        return None
    return [
        InstanceFacts(
            id=i.id, label=i.label, actual_status=i.actual_status, start_date=i.start_date
        )
        for i in listed
    ]


def _charges(deps: MonitorDeps, snapshots: list[JobSnapshot]) -> dict[int, float] | None:
    """Vast's own charges per instance, best effort (spend falls back to our estimate)."""
    since = min((g.created_at for s in snapshots for g in s.generations), default=None)
    if since is None:
        return None
    try:
        return charges_by_instance(deps.vast().charges(since=since - 86_400))
    except (VastError, ValueError) as exc:
        logger.info("monitor: Vast charges unavailable: %s", exc)
        return None


def _apply(
    deps: MonitorDeps, job: Job, decision: JobDecision, now: float, report: MonitorReport
) -> None:
    report.spend_usd += decision.spend_usd
    if abs(decision.spend_usd - job.spent_usd) > SPEND_EPSILON_USD:
        deps.store.update_job_fields(job.job_id, {"spent_usd": decision.spend_usd})
    if decision.observation is not None and decision.generation is not None:
        deps.store.update_generation(
            job.job_id,
            decision.generation,
            decision.observation.model_dump(exclude_none=True),
            only_if_current=True,
        )
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
        started = deps.transitions.start(decision.transition)
        if started:
            report.transitions_started += 1
            if decision.verdict is not None:
                deps.store.append_event(
                    TimelineEvent(
                        job_id=job.job_id,
                        at=now,
                        kind=decision.verdict.health.value,
                        message=f"{decision.transition.action}: {decision.transition.reason}",
                    )
                )
    renew = decision.renew_credentials and decision.generation is not None
    if renew and _renew_credentials(deps, job, decision.generation or 0):
        report.credentials_renewed += 1


def _renew_credentials(deps: MonitorDeps, job: Job, generation: int) -> bool:
    """Mint fresh job-scoped credentials onto the generation; the agent gets them with its
    next heartbeat reply. A Cloudflare failure waits for the next run (they are renewed well
    before they expire)."""
    try:
        client, account = deps.cloudflare()
        prefix = f"jobs/{job.job_id}/"
        minted = client.mint_temp_credentials(
            account.bucket,
            account.parent_access_key_id,
            prefix,
            credentials_ttl_s(job.spec.policy),
            lease_s=job.spec.policy.lease_window_s,
        )
    except (CloudflareError, SecretNotSet) as exc:
        logger.warning("monitor: credential renewal failed for %s: %s", job.job_id, exc)
        return False
    credentials = StorageCredentials(
        access_key_id=minted.access_key_id,
        secret_access_key=minted.secret_access_key,
        session_token=minted.session_token,
        expires_at=minted.expires_at,
        endpoint=account.r2_endpoint(deps.r2_endpoint),
        bucket=account.bucket,
        prefix=prefix,
    )
    return deps.store.update_generation(
        job.job_id,
        generation,
        {"credentials": credentials.model_dump(mode="json")},
        only_if_current=True,
    )


def report_fields(report: MonitorReport) -> dict[str, Any]:
    return {
        "jobs": report.jobs,
        "instances": report.instances,
        "verdicts": report.verdicts,
        "transitions_started": report.transitions_started,
        "credentials_renewed": report.credentials_renewed,
        "hosts_blamed": report.hosts_blamed,
        "orphans_destroyed": report.orphans_destroyed,
        "errors": report.errors,
    }
