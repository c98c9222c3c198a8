"""Timing of the job-scoped storage credentials (DESIGN §3, invariant 6). Pure.

Credentials are minted with a TTL that outlives the longest lease, so an agent whose lease runs
out can still upload its last checkpoint, and renewed by the monitor before they would no longer
outlive a lease granted now. Minting itself is `functions/adapters/cloudflare.py`.
"""

from __future__ import annotations

from functions.domain.job import Generation
from functions.domain.jobspec import Policy

CREDENTIALS_TTL_MARGIN_S = 3600  # credentials outlive the longest lease by this much
MAX_CREDENTIALS_TTL_S = 604_800  # Cloudflare's maximum (7 days)
MIN_CREDENTIALS_TTL_S = 900


def credentials_ttl_s(policy: Policy) -> int:
    """Storage credentials outlive the longest lease, so an agent whose lease runs out can
    still upload its last checkpoint."""
    ttl = policy.lease_window_s + CREDENTIALS_TTL_MARGIN_S
    return int(min(MAX_CREDENTIALS_TTL_S, max(MIN_CREDENTIALS_TTL_S, ttl)))


def needs_new_credentials(
    generation: Generation, policy: Policy, now: float, interval_s: float
) -> bool:
    """Renew once the credentials would no longer outlive a lease granted now (plus two monitor
    runs of slack, so one failed run never lets them lapse)."""
    if generation.credentials is None:
        return True
    remaining = generation.credentials.expires_at - now
    return remaining < policy.lease_window_s + 2 * interval_s


def credentials_outlive_lease(generation: Generation, policy: Policy, now: float) -> bool:
    """The generation's credentials would outlive a lease granted now: a monitor run that
    could not renew them may still count the job as supervised (the renewal starts two
    monitor intervals before this fails, so one failed call never stops a job)."""
    if generation.credentials is None:
        return False
    return generation.credentials.expires_at - now >= policy.lease_window_s
