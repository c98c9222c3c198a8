"""The lifecycle task function: one Lambda behind every Task state of the lifecycle state
machine, choosing its step by `op` (`functions/lifecycle/service.py`).

An exception's class name is the Step Functions error name, so the state machine retries
`VastUnavailable`, `RateLimited`, `InstancesStillPresent`, … and catches the rest. A malformed
input (a definition/handler mismatch, never a user's) fails with `InvalidStepInput` naming each
field.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import TypeAdapter, ValidationError

from functions.adapters import factory
from functions.domain.errors import field_errors
from functions.lifecycle import metrics as lifecycle_metrics
from functions.lifecycle import service
from functions.lifecycle.steps import LifecycleDeps, LifecycleInput
from functions.observability import logger, metrics, tracer
from functions.settings import LifecycleSettings, load_settings

_INPUT: TypeAdapter[Any] = TypeAdapter(LifecycleInput)


class InvalidStepInput(ValueError):
    """The state machine passed an input this function does not accept."""


@factory.per_container
def dependencies() -> LifecycleDeps:
    settings = load_settings(LifecycleSettings)
    providers = factory.Providers(settings)
    return LifecycleDeps(
        settings=settings,
        store=factory.store(settings.table_name),
        vast=providers.vast,
        cloudflare=providers.cloudflare,
        artifacts=lambda: factory.artifacts(settings.artifacts_bucket),
        code=providers.code_bucket,
        account_secrets=providers.account_secrets,
        clock=factory.now,
        events=factory.job_events(settings.job_events_topic_arn),
    )


def parse_input(event: Any) -> Any:
    try:
        return _INPUT.validate_python(event)
    except ValidationError as exc:
        problems = "; ".join(str(e) for e in field_errors(exc))
        raise InvalidStepInput(f"lifecycle step input is not valid: {problems}") from None


def remaining_s(context: LambdaContext) -> float:
    return context.get_remaining_time_in_millis() / 1000


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = parse_input(event)
    logger.append_keys(job_id=step.job_id, op=step.op)
    # The provision step minds the time its invocation has left (functions/lifecycle/provision.py).
    deps = replace(dependencies(), remaining_s=lambda: remaining_s(context))
    result = service.run_step(deps, step)
    logger.info(
        lifecycle_metrics.STEP_LOG_MESSAGE, extra={"outcome": result.outcome, "state": result.state}
    )
    lifecycle_metrics.step_done(result)
    return result.model_dump(mode="json")
