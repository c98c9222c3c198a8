"""Transition reasons: how a health verdict travels from the monitor to the lifecycle. Pure.

A transition's reason is `<health>: <why>`; the lifecycle reads the health back from it (a
crash counts a restart, a dead or hung host is blamed, a stop ends in the matching state).
"""

from __future__ import annotations

from functions.domain.health import Health, Verdict
from functions.domain.job import StopReason


def transition_reason(verdict: Verdict) -> str:
    """`<health>: <why>`: the lifecycle reads the health back with `reason_health`."""
    return f"{verdict.health.value}: {verdict.reason}"


def reason_health(reason: str) -> Health | None:
    head = reason.split(":", 1)[0].strip()
    try:
        return Health(head)
    except ValueError:
        return None


def stop_reason_for(reason: str) -> StopReason:
    """The terminal outcome a stop transition's reason asks for (cancel is the default)."""
    health = reason_health(reason)
    if health is Health.FINISHED:
        return "finished"
    if health is Health.FAILED:
        return "failed"
    if health is Health.OVER_BUDGET or reason.startswith("over_budget"):
        return "over_budget"
    return "cancelled"
