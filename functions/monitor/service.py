"""One monitor run, apart from Lambda: gather the facts, decide each job, apply, mark it supervised.

Liveness that proves work was done. There is no global pulse: a job's lease (and its storage
credentials) is renewed by the heartbeat API only while its current generation's
`supervised_at` is fresh, and `supervised_at` is written last in that job's evaluation
(read → decide → apply), with the time the run's facts were read. So:

- a run that fails before it has decided anything (its list of jobs cannot be read, a provider
  secret cannot be read from Secrets Manager, a bug) marks no job, and every host stops itself
  within its lease;
- a job whose evaluation fails (its generations no longer validate, a write or a transition
  start raises, its credentials cannot be renewed before they would no longer outlive a lease)
  is not marked, is counted (`JobsUnsupervised`), and stops no other job's evaluation;
- a run that runs out of time marks only the jobs it finished: Vast's calls are bounded by the
  invocation's remaining time (`remaining_s`, from the Lambda context) so that judging and
  writing always have `APPLY_RESERVE_S` left, and a job's evaluation starts only with
  `JOB_RESERVE_S` left.

Vast that cannot be read (errors, 429 storms, a listing cut short by the time budget) is not a
failure of the run: no instance rule applies this run and no orphan is swept, but spend, the
budget and the heartbeat rules are judged, and the jobs are supervised. Vast records that cannot
be read are left out and counted, never fatal (`VastRecordsSkipped`, `VastFieldsDropped`).

Before the decisions, a few running generations due for it (after their first checkpoint,
once each) are judged for a move to a cheaper host, `MOVE_CHECKS` a run, each one offer search
(`functions/domain/move.py`); a healthy one judged overpriced is replaced like any verdict's.

After every job's decision, the run looks across jobs for a correlated loss of heartbeats and
holds those dead verdicts (`functions/domain/correlated.py`, `DeadVerdictsHeld`).

A transition a decision names — a verdict's replace or stop, or the one a job in the middle of a
transition waits for — goes through the repair (`functions/monitor/repair.py`): it starts the
attempt that is due, if one is, counting later attempts (`TransitionsRetried`) and stops past
their last attempt (`TransitionsExhausted`). A job over budget is stopped even while a provision
or replace is under way (`functions/domain/reconcile.py`).

Cost grows with pages and changes, not jobs × calls: the generations of every active
job are read in BatchGetItem pages (`JobStore.read_generations`), Vast's instance pages in a few
label-range chains beside the charges (`functions/monitor/vast_reads.py`), and the jobs' decisions
are applied `APPLY_WORKERS` at a time, each job's actions in order and its report its own. A
write is made only for what moved (a replaced generation's clock only when it changed); the
observation, the job's spend and `supervised_at` are written every run a job's evaluation
completes, in one UpdateItem on the current generation, since that is what renews its lease. So
a running job costs one write a run: the job item's `spent_usd` (billed three times for its two
indexes) is written only when it lags by a step, when a transition is named, or when no
generation carries the spend (`functions.domain.spend.job_item_spend_due`); spend only ever
moves upwards on both.

A large fleet is split across schedules by a hash of the job id (`functions/domain/shards.py`):
a run sees only its shard's jobs and instances, and marks only them supervised. The ActiveJobs
index is partitioned by the same label slots, so a shard reads only its own partitions; items
written before that (one `ACTIVE` partition) are read by every run and moved to their slot's
partition by the shard that owns them, `LEGACY_MOVES` a run at most (`active_items_moved`).

What a run did is its `MonitorReport` (`functions/monitor/report.py`); what it reads from Vast
(instances, charges, the records it could not read) is `functions/monitor/vast_reads.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.adapters.cloudflare import (
    CloudflareAccount,
    CloudflareClient,
    CloudflareError,
    mint_job_credentials,
)
from functions.adapters.factory import SecretNotSet
from functions.adapters.pool import map_bounded
from functions.adapters.store import JobStore
from functions.adapters.transitions import TransitionStarter
from functions.adapters.vast import RecordIssue, VastClient, VastError
from functions.domain.credentials import credentials_outlive_lease, credentials_ttl_s
from functions.domain.job import Generation, Job, TimelineEvent
from functions.domain.measures import (
    WorkLost,
    budget_used_max_fraction,
    heartbeat_age_max_s,
    tether_instances,
    work_lost,
)
from functions.domain.move import MoveCheck, judge_move, move_due
from functions.domain.outbid import newly_outbid
from functions.domain.reconcile import (
    InstanceFacts,
    JobDecision,
    JobSnapshot,
    SupervisionSettings,
    decide_job,
    find_orphans,
    hold_correlated_loss,
    labelled_by_job,
    unseen_starts,
)
from functions.domain.recovery import LostWork
from functions.domain.shards import Shard
from functions.domain.spend import ChargesRead, job_item_spend_due
from functions.monitor import repair
from functions.monitor.report import MonitorReport, report_fields
from functions.monitor.vast_reads import count_issues, read_vast
from functions.observability import logger

__all__ = [  # the report is named here too: the handler and tests reach it as `service.…`
    "EvaluationIncomplete",
    "MonitorDeps",
    "MonitorReport",
    "report_fields",
    "run_monitor",
]

# The monitor's Lambda runs for at most 55 s (one interval less 5 s). Of what is left when a
# run starts, Vast's listing and charges may take all but APPLY_RESERVE_S; a job's evaluation
# starts only with JOB_RESERVE_S left (a few table writes, the repair's DescribeExecution calls
# and one StartExecution), a credential renewal only with CLOUDFLARE_RESERVE_S (the Cloudflare
# client's own deadline is 30 s), an orphan's destroy only with ORPHAN_RESERVE_S.
APPLY_RESERVE_S = 20.0
JOB_RESERVE_S = 5.0
CLOUDFLARE_RESERVE_S = 35.0
ORPHAN_RESERVE_S = 3.0
# Jobs applied at once: each job's few writes are sequential round trips (~10 ms from Lambda),
# so a bounded pool turns thousands of them into a few seconds without a burst DynamoDB throttles.
APPLY_WORKERS = 16
# Moves judged per run (`_judge_moves`): each is one offer search on Vast's search endpoint,
# which limits calls per endpoint; a search must leave MOVE_SEARCH_S of the run's time for it.
MOVE_CHECKS = 2
MOVE_SEARCH_S = 10.0
# Legacy ActiveJobs items moved to their slot's partition per run: 1,000 conditional
# UpdateItems, `APPLY_WORKERS` in flight, about 0.6 s at 10 ms a call; 10,000 jobs move in 10
# runs, and every run reads the ones left (`JobRecords.read_active_jobs`).
LEGACY_MOVES = 1000


def unbounded() -> float:
    return math.inf


@dataclass(frozen=True)
class MonitorDeps:
    store: JobStore
    transitions: TransitionStarter
    vast: Callable[[], VastClient]
    cloudflare: Callable[[], tuple[CloudflareClient, CloudflareAccount]]
    clock: Callable[[], float]
    settings: SupervisionSettings = field(default_factory=SupervisionSettings)
    r2_endpoint: str | None = None


class EvaluationIncomplete(Exception):
    """This job's evaluation could not be finished: it is not marked supervised."""


def run_monitor(
    deps: MonitorDeps, *, remaining_s: Callable[[], float] = unbounded, shard: Shard | None = None
) -> MonitorReport:
    """One run over the jobs of `shard` (default: the whole fleet). `remaining_s`: the seconds
    this invocation has left (Lambda's context)."""
    now = deps.clock()
    shard = shard or Shard()
    report = MonitorReport(shard=str(shard))
    snapshots = _snapshots(deps, report, shard)
    vast = _vast(deps, remaining_s() - APPLY_RESERVE_S)
    issues: list[RecordIssue] = []
    instances, charges = read_vast(vast, snapshots, issues, shard)
    report.instances = None if instances is None else len(instances)
    report.tether_instances = None if instances is None else tether_instances(instances)
    report.heartbeat_age_max_s = heartbeat_age_max_s(snapshots, now)
    count_issues(issues, report)
    first_seen: dict[int, float] = {}
    if instances is not None:
        first_seen = deps.store.first_sightings(unseen_starts(instances, {}))
    moves = _judge_moves(deps, vast, snapshots, now, report, remaining_s)
    decided = _decide(deps, snapshots, instances, charges, first_seen, now, report, moves)
    decisions, report.held = hold_correlated_loss([d for _, d in decided])
    if report.held:
        logger.warning(
            "monitor: heartbeats lost together while Vast says the hosts run: %d dead "
            "verdict(s) held (no replace, no blame)",
            report.held,
            extra={"held_jobs": [d.job_id for d in decisions if d.held]},
        )
    report.budget_used_max_fraction = budget_used_max_fraction(
        (d.spend_usd, s.job.budget_usd) for (s, _), d in zip(decided, decisions, strict=True)
    )
    _apply_all(deps, [s for s, _ in decided], decisions, now, report, remaining_s)
    if vast is not None and instances is not None:
        _sweep(deps, vast, snapshots, instances, first_seen, now, report, remaining_s)
    return report


def _vast(deps: MonitorDeps, seconds: float) -> VastClient | None:
    """The Vast client, its calls bounded to `seconds`; None while its secret holds the
    deploy-time placeholder (nothing can be rented then either). Any other failure to build
    it — Secrets Manager cannot be read, say — fails the run: no job is marked supervised."""
    try:
        return deps.vast().bounded(seconds)
    except SecretNotSet as exc:
        logger.warning("monitor: no Vast key; no instance rule this run: %s", exc)
        return None


def _snapshots(deps: MonitorDeps, report: MonitorReport, shard: Shard) -> list[JobSnapshot]:
    """Every active job of the shard with its generations, read in pages
    (`JobStore.read_generations`, not a Query per job); a job whose items cannot be read is
    counted and left out (its lease is not renewed), never fatal to the others."""
    active = deps.store.read_active_jobs(shard.slots)
    for key, why in active.unreadable:
        logger.error("monitor: job item cannot be read; not supervised: %s", why, extra={"pk": key})
    if active.legacy:
        try:
            report.active_items_moved = deps.store.move_to_slot_partitions(
                active.legacy[:LEGACY_MOVES], workers=APPLY_WORKERS
            )
        except Exception:  # a move is housekeeping: the items are still read where they are
            logger.exception("monitor: legacy ActiveJobs items not moved this run")
    report.jobs = len(active.jobs) + len(active.unreadable)
    report.unsupervised += len(active.unreadable)
    report.errors += len(active.unreadable)
    reads = deps.store.read_generations(active.jobs)
    snapshots: list[JobSnapshot] = []
    for job in active.jobs:
        failed = reads.failed.get(job.job_id)
        if failed is not None:
            report.errors += 1
            report.unsupervised += 1
            logger.error("monitor: %s", failed, extra={"job_id": job.job_id})
            continue
        generations = tuple(reads.generations.get(job.job_id, ()))
        snapshots.append(JobSnapshot(job=job, generations=generations))
    return snapshots


def _decide(
    deps: MonitorDeps,
    snapshots: list[JobSnapshot],
    instances: list[InstanceFacts] | None,
    charges: ChargesRead,
    first_seen: dict[int, float],
    now: float,
    report: MonitorReport,
    moves: Mapping[str, MoveCheck],
) -> list[tuple[JobSnapshot, JobDecision]]:
    by_id = {i.id: i for i in instances} if instances is not None else None
    by_job = labelled_by_job(instances or ())
    decided = []
    for snapshot in snapshots:
        job_id = snapshot.job.job_id
        try:
            decision = decide_job(
                snapshot, by_id, charges, now=now, settings=deps.settings,
                labelled=by_job.get(job_id, ()), first_seen=first_seen, move=moves.get(job_id),
            )  # fmt: skip
        except Exception:
            report.errors += 1
            report.unsupervised += 1
            logger.exception("monitor: job cannot be judged", extra={"job_id": snapshot.job.job_id})
            continue
        decided.append((snapshot, decision))
    return decided


def _judge_moves(
    deps: MonitorDeps,
    vast: VastClient | None,
    snapshots: list[JobSnapshot],
    now: float,
    report: MonitorReport,
    remaining_s: Callable[[], float],
) -> dict[str, MoveCheck]:
    """Judge moving the generations due for it (`functions/domain/move.py`), those that started
    training first, `MOVE_CHECKS` a run at most: each is an offer search on Vast and two table
    reads (the offered hosts' reputations, the pace learned for the job's name). A judgement
    that cannot be made (Vast or the table cannot be read, no time left) is left for a later
    run: the generation stays unjudged, and stays where it is meanwhile."""
    if vast is None:
        return {}
    due = [
        s for s in snapshots if s.current is not None and move_due(s.job, s.current, s.generations)
    ]
    due.sort(key=lambda s: _training_since(s, now))
    moves: dict[str, MoveCheck] = {}
    for snapshot in due[:MOVE_CHECKS]:
        left = remaining_s() - APPLY_RESERVE_S
        if left < MOVE_SEARCH_S:
            logger.info("monitor: no time left to judge moves this run")
            break
        job = snapshot.job
        try:
            offers = vast.bounded(left).search_offers(job.spec.resources)
            machines = [o.machine_id for o in offers if o.machine_id is not None]
            moves[job.job_id] = judge_move(
                job, snapshot.generations, offers,
                reputations=deps.store.host_reputations(machines),
                measures=deps.store.job_measures(job.name), now=now,
            )  # fmt: skip
        except VastError as exc:  # judged at a later run; nothing else depends on it
            logger.warning("monitor: move not judged: %s", exc, extra={"job_id": job.job_id})
            continue
        except Exception:
            report.errors += 1
            logger.exception("monitor: move not judged", extra={"job_id": job.job_id})
            continue
        logger.info(
            "monitor: move judged", extra={"job_id": job.job_id, "why": moves[job.job_id].reason}
        )
    report.moves_judged = len(moves)
    return moves


def _training_since(snapshot: JobSnapshot, now: float) -> float:
    current = snapshot.current
    started = current.training_started_at if current is not None else None
    return now if started is None else started


def _apply_all(
    deps: MonitorDeps,
    snapshots: list[JobSnapshot],
    decisions: tuple[JobDecision, ...] | list[JobDecision],
    now: float,
    report: MonitorReport,
    remaining_s: Callable[[], float],
) -> None:
    """Apply every job's decision, `APPLY_WORKERS` jobs at a time (their writes are remote
    round trips; boto3 clients are thread-safe). A job's own actions stay in order, and each
    job counts into a report of its own, merged after: one job's failure stops no other."""

    def one(snapshot: JobSnapshot, decision: JobDecision) -> MonitorReport:
        part = MonitorReport()
        if remaining_s() < JOB_RESERVE_S:
            part.unsupervised += 1
            part.out_of_time += 1
            return part
        try:
            _apply(deps, snapshot, decision, now, part, remaining_s)
        except Exception:  # one job's trouble must not stop the others; it renews nothing
            part.errors += 1
            part.unsupervised += 1
            logger.exception("monitor: job evaluation failed", extra={"job_id": decision.job_id})
        else:
            part.supervised += 1
        return part

    pairs = list(zip(snapshots, decisions, strict=True))
    parts = map_bounded(lambda pair: one(*pair), pairs, workers=APPLY_WORKERS)
    for part in parts:
        report.merge(part)
    if report.out_of_time:
        logger.warning(
            "monitor: out of time; %d job(s) left unsupervised this run", report.out_of_time
        )


def _apply(
    deps: MonitorDeps,
    snapshot: JobSnapshot,
    decision: JobDecision,
    now: float,
    report: MonitorReport,
    remaining_s: Callable[[], float],
) -> None:
    """Every action of one job's decision, then `supervised_at` (only if all of them held)."""
    job = snapshot.job
    store = deps.store
    report.spend_usd += decision.spend_usd
    # The exact spend goes with the observation (`record_supervised`, below); the job item
    # (billed 3x for its two indexes) only in steps and at transitions.
    carried = None not in (snapshot.current, decision.generation, decision.observation)
    if job_item_spend_due(
        job.spent_usd, decision.spend_usd, job.budget_usd,
        carried=carried, transition=decision.transition is not None,
    ):  # fmt: skip
        store.record_spend(job.job_id, decision.spend_usd)
    if decision.sightings:
        store.record_unrecorded_instances(job.job_id, decision.sightings)
    for changed in decision.clocks:
        store.record_status_clock(job.job_id, changed.generation, changed.clock)
    if decision.verdict is not None:
        name = decision.verdict.health.value
        report.verdicts[name] = report.verdicts.get(name, 0) + 1
        _tell_outbid(deps, snapshot, decision, now)
    if decision.blame is not None:
        blame = decision.blame
        if store.record_host_failure(
            blame.machine_id, failure=blame.failure, kind=blame.kind, now=now
        ):
            report.hosts_blamed += 1
    if decision.replaced_for is not None and decision.generation is not None:
        store.record_replacement_cause(job.job_id, decision.generation, decision.replaced_for)
    if decision.transition is not None:
        _advance_transition(deps, snapshot, decision, now, report)
    current = snapshot.current
    if current is None or decision.generation is None or decision.observation is None:
        return  # nothing rented to supervise: no lease to renew
    if decision.renew_credentials:
        current = _renew_credentials(deps, job, current, report, remaining_s)
    if decision.transition is None and not credentials_outlive_lease(current, job.spec.policy, now):
        raise EvaluationIncomplete(
            "storage credentials could not be renewed and would not outlive a lease"
        )
    if not decision.renew_lease:
        logger.warning(
            "monitor: Vast's charges unread for %d runs; lease not renewed",
            deps.settings.charges_unread_runs_max, extra={"job_id": job.job_id},
        )  # fmt: skip
    store.record_supervised(
        job.job_id, decision.generation, decision.observation, at=now,
        renew_lease=decision.renew_lease,
    )  # fmt: skip


def _tell_outbid(
    deps: MonitorDeps, snapshot: JobSnapshot, decision: JobDecision, now: float
) -> None:
    """A new outbid the monitor waits for goes on the timeline with the wait it is worth (one
    it replaces at once is told by the replace)."""
    verdict, current, seen = decision.verdict, snapshot.current, decision.observation
    if verdict is None or current is None or seen is None or not newly_outbid(seen, current):
        return
    if verdict.waited_out:
        return
    deps.store.append_event(
        TimelineEvent(
            job_id=decision.job_id, at=now, kind="outbid_wait",
            message=f"outbid: {verdict.reason}", data={"generation": current.generation},
        )
    )  # fmt: skip


def _advance_transition(
    deps: MonitorDeps,
    snapshot: JobSnapshot,
    decision: JobDecision,
    now: float,
    report: MonitorReport,
) -> None:
    """Start the attempt of the decision's transition that is due, if one is
    (`functions/monitor/repair.py`); the first attempt of a verdict's transition is told on the
    timeline (with the incident and the work lost, for a replace)."""
    assert decision.transition is not None
    outcome = repair.advance(deps.transitions, deps.store, decision.transition, now=now)
    report.transitions_retried += outcome.retried
    report.transitions_exhausted += outcome.status == "exhausted"
    if not outcome.started_first_attempt:
        return
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
                job_id=decision.job_id,
                at=now,
                kind=decision.verdict.health.value,
                message=message,
                data=data,
            )
        )


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
    """A lower bound: the host may have trained on after its last heartbeat."""
    steps = LostWork(steps=lost.steps, lower_bound=True).describe()
    seconds = f" (≈ {lost.seconds:.0f} s of training)" if lost.steps and lost.seconds else ""
    return f"{steps} since the last checkpoint{seconds}, as of the last heartbeat"


def _renew_credentials(
    deps: MonitorDeps,
    job: Job,
    generation: Generation,
    report: MonitorReport,
    remaining_s: Callable[[], float],
) -> Generation:
    """Mint the generation's two keys (read the job's prefix, write its own `g<n>/`) afresh
    onto it; the agent gets them with its next heartbeat reply (only while the job is
    supervised). A Cloudflare failure, or too
    little time left for the call, waits for the next run: they are renewed two intervals
    before they would no longer outlive a lease. Returns the generation as it now stands."""
    if remaining_s() < CLOUDFLARE_RESERVE_S:
        logger.info("monitor: no time left to renew credentials of %s this run", job.job_id)
        return generation
    try:
        client, account = deps.cloudflare()
        credentials = mint_job_credentials(
            client,
            account,
            job.job_id,
            generation.generation,
            ttl_s=credentials_ttl_s(job.spec.policy),
            lease_s=job.spec.policy.lease_window_s,
            endpoint=account.r2_endpoint(deps.r2_endpoint),
        )
    except (CloudflareError, SecretNotSet) as exc:
        logger.warning("monitor: credential renewal failed for %s: %s", job.job_id, exc)
        return generation
    if not deps.store.store_credentials(job.job_id, generation.generation, credentials):
        return generation
    report.credentials_renewed += 1
    return generation.model_copy(update={"credentials": credentials})


def _sweep(
    deps: MonitorDeps,
    vast: VastClient,
    snapshots: list[JobSnapshot],
    instances: list[InstanceFacts],
    first_seen: dict[int, float],
    now: float,
    report: MonitorReport,
    remaining_s: Callable[[], float],
) -> None:
    """Keep the first sighting of labelled instances without a start date, and destroy the
    orphans (those without a start date are as old as their first sighting)."""
    for instance_id in unseen_starts(instances, first_seen):
        try:
            deps.store.record_first_sighting(instance_id, now)
        except Exception:
            report.errors += 1
            logger.exception("monitor: first sighting not kept", extra={"id": instance_id})
    orphans = find_orphans(
        snapshots, instances, now=now, settings=deps.settings, first_seen=first_seen
    )
    for orphan in orphans:
        left = remaining_s() - ORPHAN_RESERVE_S
        if left <= 0:
            logger.warning("monitor: out of time; orphans left for the next run")
            return
        try:
            vast.bounded(left).destroy_instance(orphan.instance_id)
        except VastError:
            report.errors += 1
            logger.exception("monitor: orphan destroy failed", extra={"id": orphan.instance_id})
            continue
        report.orphans_destroyed += 1
        logger.info(
            "orphan destroyed",
            extra={"instance_id": orphan.instance_id, "label": orphan.label, "why": orphan.reason},
        )
