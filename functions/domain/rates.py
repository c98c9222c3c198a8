"""Event rates learned from a prior and a record (pure): one rule for host failures
(`functions.domain.checkpoint_interval`) and outbids (`functions.domain.market`).

Events arriving at a constant rate (a Poisson process) with a Gamma prior on that rate: the
posterior mean is

    rate = (prior rate × prior hours + events seen) / (prior hours + hours watched)

so the prior counts as `prior_hours` of observation: one early event moves the rate without
becoming the whole story, and a long record outweighs the prior.
"""

from __future__ import annotations


def posterior_rate_per_hour(
    prior_per_hour: float, events: int, hours: float, *, prior_hours: float
) -> float:
    """The rate after `events` in `hours`, with `prior_per_hour` worth `prior_hours`."""
    return (prior_per_hour * prior_hours + events) / (prior_hours + max(0.0, hours))
