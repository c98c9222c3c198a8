"""Timing of the generation-scoped storage credentials (docs/architecture.md#credentials,
invariant 6). Pure.

A generation holds two R2 temporary keys (`functions/adapters/cloudflare.py` mints them): read-only
on the job's prefix and read-write on its own `g<generation>/`. Both are short-lived and kept
coherent with the lease:

- they are minted to outlive the longest lease by `CREDENTIALS_TTL_MARGIN_S` and no more, so an
  agent whose lease runs out can still upload its last checkpoint, and a key left on a replaced
  or zombie host dies soon after the lease it went out with;
- the monitor renews them (only while the job is judged healthy) once they would no longer
  outlive a lease granted now, with two monitor runs of slack;
- a lease is never granted past `expires_at - FINAL_UPLOAD_S` of the credentials the generation
  holds (`lease_within_credentials`): if renewal fails for long, the host stops itself while it
  can still save, instead of training on with nothing to save to.
"""

from __future__ import annotations

from functions.domain.job import Generation
from functions.domain.jobspec import Policy

CREDENTIALS_TTL_MARGIN_S = 900  # credentials outlive the longest lease by this much
FINAL_UPLOAD_S = 300  # a lease ends at least this long before the credentials do
MAX_CREDENTIALS_TTL_S = 604_800  # Cloudflare's maximum (7 days)
MIN_CREDENTIALS_TTL_S = 900


def credentials_ttl_s(policy: Policy) -> int:
    """Storage credentials outlive the longest lease by the margin, no more."""
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


def lease_within_credentials(
    lease_expires_at: float, credentials_expire_at: float, now: float
) -> float:
    """The lease, cut so that it ends `FINAL_UPLOAD_S` before the credentials (never before
    `now`): past that the agent could not upload a final checkpoint."""
    return max(now, min(lease_expires_at, credentials_expire_at - FINAL_UPLOAD_S))
