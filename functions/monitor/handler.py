"""The monitor function: run by EventBridge Scheduler every minute (`functions/monitor/service`);
its report becomes metrics (`functions/monitor/metrics`) and one log line."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.domain.reconcile import SupervisionSettings
from functions.monitor import metrics as monitor_metrics
from functions.monitor import service
from functions.observability import logger, metrics, tracer
from functions.settings import MonitorSettings, load_settings


@factory.per_container
def dependencies() -> service.MonitorDeps:
    settings = load_settings(MonitorSettings)
    return service.MonitorDeps(
        store=factory.store(settings.table_name),
        transitions=factory.transitions(settings.state_machine_arn),
        vast=lambda: factory.vast(
            settings.vast_secret_arn,
            settings.vast_base_url,
            deadline_s=settings.vast_deadline_s,
            timeout_s=settings.vast_timeout_s,
        ),
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
    monitor_metrics.emit(report)
    fields = service.report_fields(report)
    logger.info("monitor run", extra=fields)
    return fields
