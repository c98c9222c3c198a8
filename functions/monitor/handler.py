"""The monitor function: run by EventBridge Scheduler every minute (`functions/monitor/service`).

Emits Powertools EMF metrics with the service as the only dimension (bounded cost): jobs
supervised, verdict counts, transitions started, credentials renewed, hosts blamed, orphans
destroyed, whether Vast could be read, the spend of all active jobs, the labelled instances on
Vast, and — while there are jobs to measure — the highest budget fraction used, the oldest
heartbeat and the work lost per replace (`functions/domain/measures.py`).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.domain.measures import (
    BUDGET_FRACTION_METRIC,
    HEARTBEAT_AGE_METRIC,
    INSTANCES_METRIC,
    WORK_LOST_METRIC,
)
from functions.domain.supervision import SupervisionSettings
from functions.monitor import service
from functions.observability import MetricUnit, logger, metrics, tracer
from functions.settings import MonitorSettings, load_settings


def dependencies() -> service.MonitorDeps:
    settings = load_settings(MonitorSettings)
    return service.MonitorDeps(
        store=factory.store(settings.table_name),
        transitions=factory.transitions(settings.state_machine_arn),
        vast=lambda: factory.vast(settings.vast_secret_arn, settings.vast_base_url),
        cloudflare=lambda: factory.cloudflare(
            settings.cloudflare_secret_arn, settings.cloudflare_base_url
        ),
        clock=factory.now,
        settings=SupervisionSettings(
            interval_s=settings.monitor_interval_s, orphan_grace_s=settings.monitor_interval_s
        ),
        r2_endpoint=settings.r2_endpoint,
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = service.run_monitor(dependencies())
    count = MetricUnit.Count
    metrics.add_metric(name="JobsSupervised", unit=count, value=report.jobs)
    metrics.add_metric(name="VastListFailed", unit=count, value=int(report.instances is None))
    metrics.add_metric(name="TransitionsStarted", unit=count, value=report.transitions_started)
    metrics.add_metric(name="CredentialsRenewed", unit=count, value=report.credentials_renewed)
    metrics.add_metric(name="HostsBlamed", unit=count, value=report.hosts_blamed)
    metrics.add_metric(name="OrphansDestroyed", unit=count, value=report.orphans_destroyed)
    metrics.add_metric(name="MonitorErrors", unit=count, value=report.errors)
    metrics.add_metric(name="ActiveSpendUsd", unit=MetricUnit.NoUnit, value=report.spend_usd)
    for verdict, n in sorted(report.verdicts.items()):
        metrics.add_metric(name=f"Verdict_{verdict}", unit=count, value=n)
    # Only when there is something to measure: no job, no datapoint (and no idle cost).
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
    fields = service.report_fields(report)
    logger.info("monitor run", extra=fields)
    return fields
