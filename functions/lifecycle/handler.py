"""The lifecycle task function: one Lambda behind every Task state of the lifecycle state
machine, choosing its step by `op` (`functions/lifecycle/service.py`).

An exception's class name is the Step Functions error name, so the state machine retries
`VastUnavailable`, `RateLimited`, `InstancesStillPresent`, … and catches the rest. A malformed
input (a definition/handler mismatch, never a user's) fails with `InvalidStepInput` naming each
field.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import TypeAdapter, ValidationError

from functions.adapters import factory
from functions.adapters.notify import JobEvents
from functions.domain.errors import field_errors
from functions.lifecycle import service
from functions.observability import MetricUnit, logger, metrics, tracer
from functions.settings import LifecycleSettings, load_settings

_INPUT: TypeAdapter[Any] = TypeAdapter(service.LifecycleInput)
AGENT_WHEEL_PREFIX = "agent/"


class InvalidStepInput(ValueError):
    """The state machine passed an input this function does not accept."""


class AgentWheelMissing(RuntimeError):
    """The artifacts bucket holds no agent wheel: run `make deploy` (it uploads one)."""


def dependencies() -> service.LifecycleDeps:
    settings = load_settings(LifecycleSettings)

    def presign_wheel() -> str:
        s3 = factory.s3()
        listed = s3.list_objects_v2(Bucket=settings.artifacts_bucket, Prefix=AGENT_WHEEL_PREFIX)
        wheels = [o for o in listed.get("Contents", []) if o["Key"].endswith(".whl")]
        if not wheels:
            raise AgentWheelMissing(
                f"no agent wheel under s3://{settings.artifacts_bucket}/{AGENT_WHEEL_PREFIX}"
            )
        newest = max(wheels, key=lambda o: o["LastModified"])
        return str(
            s3.generate_presigned_url(
                "get_object",
                Params={"Bucket": settings.artifacts_bucket, "Key": newest["Key"]},
                ExpiresIn=service.WHEEL_URL_TTL_S,
            )
        )

    def account_secrets() -> list[str]:
        _, account = factory.cloudflare(
            settings.cloudflare_secret_arn, settings.cloudflare_base_url
        )
        return [factory.vast_api_key(settings.vast_secret_arn), account.api_token]

    return service.LifecycleDeps(
        settings=settings,
        store=factory.store(settings.table_name),
        vast=lambda: factory.vast(settings.vast_secret_arn, settings.vast_base_url),
        cloudflare=lambda: factory.cloudflare(
            settings.cloudflare_secret_arn, settings.cloudflare_base_url
        ),
        presign_wheel=presign_wheel,
        account_secrets=account_secrets,
        clock=factory.now,
        events=JobEvents(settings.job_events_topic_arn),
    )


def parse_input(event: Any) -> Any:
    try:
        return _INPUT.validate_python(event)
    except ValidationError as exc:
        problems = "; ".join(str(e) for e in field_errors(exc))
        raise InvalidStepInput(f"lifecycle step input is not valid: {problems}") from None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    step = parse_input(event)
    logger.append_keys(job_id=step.job_id, op=step.op)
    result = service.run_step(dependencies(), step)
    logger.info("lifecycle step", extra={"outcome": result.outcome, "state": result.state})
    if result.outcome in ("rented", "lost_race", "no_capacity", "destroyed", "failed"):
        metrics.add_metric(name=f"Lifecycle_{result.outcome}", unit=MetricUnit.Count, value=1)
    return result.model_dump(mode="json")
