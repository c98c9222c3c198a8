"""A monitor run's report as metrics: every name, unit and value the dashboard and the alarms
read (`infra/constructs/observability.py`), in one place.

CloudWatch bills every metric (name + dimension values) that receives a datapoint in an hour,
pro rata ($0.30 a metric-month): a zero sent every run costs as much as a real count. So an idle
run (no active job, no labelled instance, nothing went wrong) emits nothing:

- counters (held dead verdicts, transitions started, retried or past their last attempt,
  credentials renewed, hosts blamed, orphans destroyed, errors, Vast records skipped or fields
  dropped, a failed Vast list, and `MonitorFindings`: orphans, held verdicts and stops given up
  together, what the one MonitorFinding alarm reads) only when non-zero; their alarms treat
  missing data as OK;
- gauges only while there is something to measure: the active jobs, the jobs whose evaluation
  did not complete (`JobsUnsupervised`: its alarm takes the Minimum over every run of ten
  minutes, so its zeros are sent while any job is active), the spend of active jobs, the
  labelled instances on Vast (when non-zero), the highest budget fraction used, the oldest
  heartbeat and the work lost per replace (`functions/domain/measures.py`);
- verdicts as one metric, `Recoveries` (dead, hung or crashed: the replace-worthy ones), with no
  per-cause dimension: a dimension value is billed like a metric name of its own, so
  `Verdict{cause=dead}` costs what `Verdict_dead` did. The cause stays in the run's log line
  (`verdicts`), which the dashboard's "Recoveries by cause" widget queries.

A sharded fleet (`functions/domain/shards.py`) sends `JobsUnsupervised` with a `shard` dimension:
its alarm takes each shard's Minimum, and one shard's zeros must not hide another's failures
(one metric per shard is billed, only while jobs are active). Every other metric adds up across
shards as it is.
"""

from __future__ import annotations

from functions.domain.measures import (
    BUDGET_FRACTION_METRIC,
    HEARTBEAT_AGE_METRIC,
    HELD_METRIC,
    HOSTS_BLAMED_METRIC,
    INSTANCES_METRIC,
    JOBS_METRIC,
    MONITOR_ERRORS_METRIC,
    MONITOR_FINDINGS_METRIC,
    ORPHANS_METRIC,
    RECOVERIES_METRIC,
    RECOVERY_CAUSES,
    SHARD_DIMENSION,
    SPEND_METRIC,
    TRANSITIONS_EXHAUSTED_METRIC,
    UNSUPERVISED_METRIC,
    WORK_LOST_METRIC,
)
from functions.domain.shards import Shard
from functions.monitor.report import MonitorReport
from functions.observability import NAMESPACE, SERVICE, MetricUnit, metrics, single_metric

RECORDS_SKIPPED_METRIC = "VastRecordsSkipped"
FIELDS_DROPPED_METRIC = "VastFieldsDropped"
VAST_LIST_FAILED_METRIC = "VastListFailed"


def findings(report: MonitorReport) -> int:
    """What the MonitorFinding alarm reads: orphans destroyed, dead verdicts held and stops past
    their last attempt, together."""
    return report.orphans_destroyed + report.held + report.transitions_exhausted


def _counters(report: MonitorReport) -> dict[str, int]:
    return {
        MONITOR_FINDINGS_METRIC: findings(report),
        HELD_METRIC: report.held,
        VAST_LIST_FAILED_METRIC: int(report.instances is None),
        "TransitionsStarted": report.transitions_started,
        "TransitionsRetried": report.transitions_retried,
        TRANSITIONS_EXHAUSTED_METRIC: report.transitions_exhausted,
        "CredentialsRenewed": report.credentials_renewed,
        HOSTS_BLAMED_METRIC: report.hosts_blamed,
        ORPHANS_METRIC: report.orphans_destroyed,
        MONITOR_ERRORS_METRIC: report.errors,
        RECORDS_SKIPPED_METRIC: report.vast_records_skipped,
        FIELDS_DROPPED_METRIC: report.vast_fields_dropped,
        RECOVERIES_METRIC: sum(report.verdicts.get(cause, 0) for cause in RECOVERY_CAUSES),
        INSTANCES_METRIC: report.tether_instances or 0,
    }


def emit(report: MonitorReport, shard: Shard | None = None) -> None:
    count = MetricUnit.Count
    if report.jobs:
        metrics.add_metric(name=JOBS_METRIC, unit=count, value=report.jobs)
        if shard is None or shard.whole:
            metrics.add_metric(name=UNSUPERVISED_METRIC, unit=count, value=report.unsupervised)
        else:
            with single_metric(
                name=UNSUPERVISED_METRIC, unit=count, value=report.unsupervised,
                namespace=NAMESPACE, default_dimensions={"service": SERVICE},
            ) as metric:  # fmt: skip
                metric.add_dimension(name=SHARD_DIMENSION, value=str(shard.index))
        metrics.add_metric(name=SPEND_METRIC, unit=MetricUnit.NoUnit, value=report.spend_usd)
    for name, value in _counters(report).items():
        if value:
            metrics.add_metric(name=name, unit=count, value=value)
    if report.budget_used_max_fraction is not None:
        metrics.add_metric(
            name=BUDGET_FRACTION_METRIC,
            unit=MetricUnit.NoUnit,
            value=report.budget_used_max_fraction,
        )
    if report.heartbeat_age_max_s is not None:
        metrics.add_metric(
            name=HEARTBEAT_AGE_METRIC, unit=MetricUnit.Seconds, value=report.heartbeat_age_max_s
        )
    for seconds in report.work_lost_s:
        metrics.add_metric(name=WORK_LOST_METRIC, unit=MetricUnit.Seconds, value=seconds)
