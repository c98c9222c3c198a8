"""The facts the health policy tests classify: `state()`, a healthy training generation one
hour in, and builders that change one fact at a time (heartbeat, GPU probe, instance, start)."""

from __future__ import annotations

from typing import Any

from functions.domain.health import HealthInput, HeartbeatView, InstanceView
from functions.domain.heartbeat_contract import GpuProbe
from functions.domain.jobspec import Policy

NOW = 1_000_000.0
POLICY = Policy()  # heartbeat 180 s, GPU unresponsive 300 s, no progress 1800 s at ≤ 5 %,
# startup 1200 s, 3 restarts


def gpu(util: float | None = 90.0, **kw: Any) -> GpuProbe:
    return GpuProbe(available=kw.pop("available", True), utilization_pct=util, **kw)


def hb(age: float = 10, phase: str = "training", **kw: Any) -> HeartbeatView:
    kw.setdefault("gpu", gpu())
    kw.setdefault("step", 100)
    return HeartbeatView(at=NOW - age, phase=phase, **kw)


def state(**overrides: Any) -> HealthInput:
    """A healthy training generation, one hour in; overrides change one fact at a time."""
    policy = overrides.pop("policy", POLICY)
    base: dict[str, Any] = {
        "now": NOW,
        "policy": policy,
        "started_at": NOW - 3600,
        "instance": InstanceView(actual_status="running"),
        "heartbeat": hb(),
        "progress_at": NOW - 60,
        "spend_usd": 1.0,
        "budget_usd": 100.0,
        "usd_per_hour": 1.0,
        "monitor_interval_s": 60,
        "restarts_so_far": 0,
    }
    base.update(overrides)
    return HealthInput(**base)


def starting(waited: float, **overrides: Any) -> HealthInput:
    overrides.setdefault("instance", InstanceView(actual_status="loading"))
    overrides.setdefault("heartbeat", None)
    overrides.setdefault("progress_at", None)
    return state(started_at=NOW - waited, **overrides)


def inst(status: str | None = "running", **kw: Any) -> InstanceView:
    return InstanceView(actual_status=status, **kw)
