"""`MonitorReport`: what one monitor run did, and `report_fields`, its fields for the run's log
line; `functions/monitor/metrics.py` turns it into metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MonitorReport:
    """What one run did; `functions/monitor/metrics.py` turns it into metrics."""

    shard: str = "0/1"  # which shard of the fleet this run judged (functions/domain/shards.py)
    jobs: int = 0
    supervised: int = 0  # jobs whose evaluation completed (supervised_at written)
    unsupervised: int = 0  # active jobs whose evaluation failed or did not fit in the run
    instances: int | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    held: int = 0  # dead verdicts held: heartbeats lost together (correlated loss)
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
    out_of_time: int = 0  # jobs not applied: the run ran out of time (counted in unsupervised)
    active_items_moved: int = 0  # legacy ActiveJobs items moved to their slot's partition
    moves_judged: int = 0  # running jobs judged for a move to a cheaper host (domain/move.py)

    def merge(self, part: MonitorReport) -> None:
        """Add what one job's evaluation counted (`service._apply_all`: one report per job,
        so the pool's threads never share one)."""
        for name in _ADDED:
            setattr(self, name, getattr(self, name) + getattr(part, name))
        for verdict, count in part.verdicts.items():
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + count
        self.work_lost_s.extend(part.work_lost_s)


_ADDED = (
    "supervised", "unsupervised", "transitions_started", "transitions_retried",
    "transitions_exhausted", "credentials_renewed", "hosts_blamed", "errors", "spend_usd",
    "out_of_time",
)  # fmt: skip


def report_fields(report: MonitorReport) -> dict[str, Any]:
    return {
        "shard": report.shard,
        "jobs": report.jobs,
        "supervised": report.supervised,
        "unsupervised": report.unsupervised,
        "instances": report.instances,
        "verdicts": report.verdicts,
        "held": report.held,
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
        "active_items_moved": report.active_items_moved,
        "moves_judged": report.moves_judged,
    }
