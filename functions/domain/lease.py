"""The agent's lease, the dead-man switch (docs/architecture.md#lease, invariant 4). Pure.

One rule, used by the heartbeat (a renewal) and by provisioning (the first lease, in the host's
environment): `min(lease window, remaining budget / current $ per hour)`.
"""

from __future__ import annotations


def lease_s(
    *, lease_window_s: float, budget_usd: float, spent_usd: float, usd_per_hour: float
) -> float:
    """How long the agent may run without hearing from the supervisor.

    With the supervisor dead, spend passes the cap by at most the lease (invariant 4). A free
    host gets the full window; an exhausted budget gets 0 (stop now), whatever the price.
    """
    remaining = budget_usd - spent_usd
    if remaining <= 0:
        return 0.0
    if usd_per_hour <= 0:
        return float(lease_window_s)
    return min(float(lease_window_s), remaining / usd_per_hour * 3600)


def lease_expires_at(
    now: float, *, lease_window_s: float, budget_usd: float, spent_usd: float, usd_per_hour: float
) -> float:
    """The lease as the agent gets it: an absolute expiry, `now` + `lease_s`."""
    return now + lease_s(
        lease_window_s=lease_window_s,
        budget_usd=budget_usd,
        spent_usd=spent_usd,
        usd_per_hour=usd_per_hour,
    )
