"""Logger, Tracer and Metrics, set up once for every function.

Service name and metrics namespace come from the environment the CDK stack sets
(`POWERTOOLS_SERVICE_NAME`, `POWERTOOLS_METRICS_NAMESPACE`); the defaults only serve tests and
the local stack. Metrics carry no per-job dimension: every dimension combination is a billed
CloudWatch metric, so dimensions stay bounded (the service name only).
"""

from __future__ import annotations

import os
import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit

from functions.settings import METRICS_NAMESPACE_ENV, SERVICE_NAME_ENV

SERVICE = os.environ.get(SERVICE_NAME_ENV, "tether")
NAMESPACE = os.environ.get(METRICS_NAMESPACE_ENV, "Tether")

# A route that emits no metric (GET) is normal, not worth a warning per request.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

__all__ = ["NAMESPACE", "SERVICE", "MetricUnit", "logger", "metrics", "single_metric", "tracer"]
