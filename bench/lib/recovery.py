"""Recovery latency as pure arithmetic: the milestones of one incident → its breakdown."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Milestones:
    """Epoch seconds of what happened after one fault (None: it never happened)."""

    kind: str
    fault_at: float
    detected_at: float | None  # the monitor's dead / hung verdict
    execution_start: float | None  # the replace execution that verdict started
    execution_stop: float | None
    rent_at: float | None  # the replacement's rent request
    first_heartbeat_at: float | None  # the replacement's agent is up
    restoring_at: float | None
    training_at: float | None  # its training process started (the agent's report)
    first_step_at: float | None  # its first training step after the restore (the agent's report)


@dataclass(frozen=True)
class Incident:
    kind: str
    threshold_s: float
    monitor_interval_s: float
    detection_s: float | None
    to_rent_s: float | None
    execution_s: float | None
    startup_s: float | None
    restore_s: float | None
    first_step_s: float | None  # process start → first step: imports, model build, one step
    total_s: float | None
    excess_over_interval: float | None  # (detection − threshold) / interval
    detection_over_threshold_plus_interval: float | None
    detection_within_goal: bool
    rent_within_execution: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def breakdown(m: Milestones, *, threshold_s: float, monitor_interval_s: float) -> Incident:
    """Detection (fault → verdict), to rent (verdict → rent request), start-up (rent → the new
    agent's first heartbeat), restore (its first `restoring` heartbeat → its training process
    started), first step (process start → the first training step after the restore), total
    (fault → that first step: recovery ends there, not at the process start). Goals: detection
    ≤ threshold + one monitor interval; the rent request inside the replace execution the
    verdict started."""
    detection = _between(m.fault_at, m.detected_at)
    budget = threshold_s + monitor_interval_s
    within_execution = (
        m.rent_at is not None
        and m.execution_start is not None
        and m.execution_start <= m.rent_at
        and (m.execution_stop is None or m.rent_at <= m.execution_stop)
    )
    return Incident(
        kind=m.kind,
        threshold_s=threshold_s,
        monitor_interval_s=monitor_interval_s,
        detection_s=detection,
        to_rent_s=_between(m.detected_at, m.rent_at),
        execution_s=_between(m.execution_start, m.execution_stop),
        startup_s=_between(m.rent_at, m.first_heartbeat_at),
        restore_s=_between(m.restoring_at, m.training_at),
        first_step_s=_between(m.training_at, m.first_step_at),
        total_s=_between(m.fault_at, m.first_step_at),
        excess_over_interval=(
            None if detection is None else (detection - threshold_s) / monitor_interval_s
        ),
        detection_over_threshold_plus_interval=None if detection is None else detection / budget,
        detection_within_goal=detection is not None and detection <= budget,
        rent_within_execution=within_execution,
    )
