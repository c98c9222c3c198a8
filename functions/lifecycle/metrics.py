"""What the lifecycle counts: one metric per step outcome that matters to the dashboard
(`Lifecycle_rented`, `Lifecycle_lost_race`, `Lifecycle_no_capacity`, `Lifecycle_destroyed`,
`Lifecycle_failed`); the others (begun, abandon, stopping, …) are routine."""

from __future__ import annotations

from functions.lifecycle.steps import StepOutput
from functions.observability import MetricUnit, metrics

COUNTED_OUTCOMES = frozenset({"rented", "lost_race", "no_capacity", "destroyed", "failed"})


def step_done(result: StepOutput) -> None:
    if result.outcome in COUNTED_OUTCOMES:
        metrics.add_metric(name=f"Lifecycle_{result.outcome}", unit=MetricUnit.Count, value=1)
