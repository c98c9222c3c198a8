"""Logger, Tracer and Metrics, set up once for every function.

Service name and metrics namespace come from the environment the CDK stack sets
(`POWERTOOLS_SERVICE_NAME`, `POWERTOOLS_METRICS_NAMESPACE`); the defaults only serve tests and
the local stack. Metrics carry no per-job dimension: every dimension combination is a billed
CloudWatch metric, so dimensions stay bounded (the service name only).

Traces record no value a function returns or raises: the API hands out presigned URLs (code
upload, outputs, checkpoints, logs), the heartbeat hands a host its credentials and secrets, the
lifecycle reads the user's secrets and mints R2 keys, and X-Ray keeps a trace 30 days for anyone
with X-Ray read rights. `TetherTracer` decides it for every handler and method, so the next one
cannot forget it (the CDK also sets Powertools' own switches off on every function).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit

from functions.settings import METRICS_NAMESPACE_ENV, SERVICE_NAME_ENV

SERVICE = os.environ.get(SERVICE_NAME_ENV, "tether")
NAMESPACE = os.environ.get(METRICS_NAMESPACE_ENV, "Tether")

# A route that emits no metric (GET) is normal, not worth a warning per request.
warnings.filterwarnings("ignore", message="No application metrics to publish")

TracedT = TypeVar("TracedT", bound=Callable[..., Any])


def refuse_capture(capture_response: bool | None, capture_error: bool | None) -> None:
    if capture_response or capture_error:
        raise ValueError(
            "a traced function records no response and no error: they can carry presigned "
            "URLs and secrets (functions/observability.py)"
        )


class TetherTracer(Tracer):
    """Powertools' Tracer with response and error capture always off: a handler's or method's
    subsegment keeps its timing, annotations and X-Ray's own record of an exception's type and
    message, never the value returned nor the exception object. Asking for capture is a
    ValueError where the decorator is applied (when the handler's module is imported)."""

    def capture_lambda_handler(
        self,
        lambda_handler: Callable[..., Any] | None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> Callable[..., Any]:
        refuse_capture(capture_response, capture_error)
        return super().capture_lambda_handler(
            lambda_handler, capture_response=False, capture_error=False
        )

    @overload
    def capture_method(self, method: TracedT) -> TracedT: ...

    @overload
    def capture_method(
        self,
        method: None = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> Callable[[TracedT], TracedT]: ...

    def capture_method(
        self,
        method: Any = None,
        capture_response: bool | None = None,
        capture_error: bool | None = None,
    ) -> Any:
        refuse_capture(capture_response, capture_error)
        return super().capture_method(method, capture_response=False, capture_error=False)


logger = Logger(service=SERVICE)
tracer = TetherTracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

__all__ = ["NAMESPACE", "SERVICE", "MetricUnit", "logger", "metrics", "single_metric", "tracer"]
