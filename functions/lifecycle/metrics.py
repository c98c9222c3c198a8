"""What the lifecycle counts: `JobsFailed` (a job failed for good: the JobFailed alarm) and
`RentsRefused` (a rent Vast refuses for its arguments whatever the offer: a dashboard line; the
state machine's Fail step then fails the job, so the JobFailed alarm reports it). The other
outcomes that matter to the dashboard (`rented`, `lost_race`, `no_capacity`, `destroyed`) are
the `outcome` field of the handler's "lifecycle step" log line, which the dashboard queries: a
metric per outcome (or one metric with an `outcome` dimension, billed the same per value) would
cost $0.30 a metric-month each for counts nobody alarms on."""

from __future__ import annotations

from functions.domain.measures import (
    JOBS_FAILED_METRIC,
    LIFECYCLE_STEP_MESSAGE,
    RENTS_REFUSED_METRIC,
)
from functions.lifecycle.steps import StepOutput
from functions.observability import MetricUnit, metrics

STEP_LOG_MESSAGE = LIFECYCLE_STEP_MESSAGE  # the handler's line; the dashboard reads `outcome`


def step_done(result: StepOutput) -> None:
    if result.outcome == "failed":
        metrics.add_metric(name=JOBS_FAILED_METRIC, unit=MetricUnit.Count, value=1)
    elif result.outcome == "rent_refused":
        metrics.add_metric(name=RENTS_REFUSED_METRIC, unit=MetricUnit.Count, value=1)
