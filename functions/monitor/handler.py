"""The monitor function: run by EventBridge Scheduler every minute (`functions/monitor/service`).

Emits Powertools EMF metrics with the service as the only dimension (bounded cost): jobs
supervised, verdict counts, transitions started, credentials renewed, hosts blamed, orphans
destroyed, whether Vast could be read, and the spend of all active jobs.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
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
    fields = service.report_fields(report)
    logger.info("monitor run", extra=fields)
    return fields
