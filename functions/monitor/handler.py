"""The monitor function: run by EventBridge Scheduler every minute (`functions/monitor/service`);
its report becomes metrics (`functions/monitor/metrics`) and one log line. The run's Vast calls
and job evaluations are budgeted against the invocation's remaining time (the context's).

With `TETHER_MONITOR_SHARDS` > 1 there is one schedule per shard, each sending `{"shard": k}`
(`functions/domain/shards.py`); an event that names no shard, or one past the count, fails the
invocation (a schedule that does not match the deployment must not judge the wrong jobs)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.adapters import factory
from functions.domain.reconcile import SupervisionSettings
from functions.domain.shards import Shard
from functions.monitor import metrics as monitor_metrics
from functions.monitor import service
from functions.observability import logger, metrics, tracer
from functions.settings import MonitorSettings, load_settings


@factory.per_container
def monitor_settings() -> MonitorSettings:
    return load_settings(MonitorSettings)


def shard_of(event: dict[str, Any], count: int) -> Shard:
    """The shard the event names; a whole fleet's run may name none."""
    index = event.get("shard") if isinstance(event, dict) else None
    if index is None and count == 1:
        return Shard()
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"the monitor event must name its shard as an integer, got {index!r}")
    return Shard(index, count)


@factory.per_container
def dependencies() -> service.MonitorDeps:
    settings = monitor_settings()
    providers = factory.Providers(settings)
    return service.MonitorDeps(
        store=factory.store(settings.table_name),
        transitions=factory.transitions(settings.state_machine_arn),
        vast=providers.vast,
        cloudflare=providers.cloudflare,
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
    shard = shard_of(event, monitor_settings().monitor_shards)
    report = service.run_monitor(
        dependencies(),
        remaining_s=lambda: context.get_remaining_time_in_millis() / 1000,
        shard=shard,
    )
    monitor_metrics.emit(report, shard)
    fields = service.report_fields(report)
    logger.info("monitor run", extra=fields)
    return fields
