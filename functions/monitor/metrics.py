"""A monitor run's report as metrics: every name, unit and value the dashboard and the alarms
read (`infra/constructs/observability.py`), in one place.

Counts of what the run did (active jobs; jobs whose evaluation did not complete, whose leases
are therefore not renewed; verdicts; dead verdicts held for a correlated loss of heartbeats;
transitions started, later attempts started and stops past their last attempt
(`functions/monitor/repair.py`), credentials renewed, hosts blamed, orphans destroyed, errors),
whether Vast could be read, how many of Vast's records could not be read (`VastRecordsSkipped`:
left out; `VastFieldsDropped`: fields dropped from instances that were kept), the spend of all
active jobs, and — only while there is something to measure, so an idle deployment emits no
datapoint and costs nothing — the labelled instances on Vast, the highest budget fraction used,
the oldest heartbeat and the work lost per replace (`functions/domain/measures.py`).
"""

from __future__ import annotations

from functions.domain.measures import (
    BUDGET_FRACTION_METRIC,
    HEARTBEAT_AGE_METRIC,
    INSTANCES_METRIC,
    WORK_LOST_METRIC,
)
from functions.monitor.report import MonitorReport
from functions.observability import MetricUnit, metrics

RECORDS_SKIPPED_METRIC = "VastRecordsSkipped"
FIELDS_DROPPED_METRIC = "VastFieldsDropped"
UNSUPERVISED_METRIC = "JobsUnsupervised"  # active jobs whose evaluation did not complete
HELD_METRIC = "DeadVerdictsHeld"  # dead verdicts held: heartbeats lost together
# A stop past its last attempt (functions/domain/attempts.py): the job stays STOPPING while
# the orphan sweep destroys its instances; the TransitionGaveUp alarm asks someone to look.
TRANSITIONS_EXHAUSTED_METRIC = "TransitionsExhausted"


def emit(report: MonitorReport) -> None:
    count = MetricUnit.Count
    metrics.add_metric(name="JobsSupervised", unit=count, value=report.jobs)
    metrics.add_metric(name=UNSUPERVISED_METRIC, unit=count, value=report.unsupervised)
    metrics.add_metric(name=HELD_METRIC, unit=count, value=report.held)
    metrics.add_metric(name="VastListFailed", unit=count, value=int(report.instances is None))
    metrics.add_metric(name="TransitionsStarted", unit=count, value=report.transitions_started)
    metrics.add_metric(name="TransitionsRetried", unit=count, value=report.transitions_retried)
    metrics.add_metric(
        name=TRANSITIONS_EXHAUSTED_METRIC, unit=count, value=report.transitions_exhausted
    )
    metrics.add_metric(name="CredentialsRenewed", unit=count, value=report.credentials_renewed)
    metrics.add_metric(name="HostsBlamed", unit=count, value=report.hosts_blamed)
    metrics.add_metric(name="OrphansDestroyed", unit=count, value=report.orphans_destroyed)
    metrics.add_metric(name="MonitorErrors", unit=count, value=report.errors)
    metrics.add_metric(name=RECORDS_SKIPPED_METRIC, unit=count, value=report.vast_records_skipped)
    metrics.add_metric(name=FIELDS_DROPPED_METRIC, unit=count, value=report.vast_fields_dropped)
    metrics.add_metric(name="ActiveSpendUsd", unit=MetricUnit.NoUnit, value=report.spend_usd)
    for verdict, n in sorted(report.verdicts.items()):
        metrics.add_metric(name=f"Verdict_{verdict}", unit=count, value=n)
    if report.tether_instances is not None:
        metrics.add_metric(name=INSTANCES_METRIC, unit=count, value=report.tether_instances)
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
