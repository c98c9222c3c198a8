"""Timing of a generation's storage keys (functions/domain/credentials.py): short, kept
coherent with the lease, renewed before a lease granted now could outlive them."""

from __future__ import annotations

import pytest

from functions.domain.credentials import (
    CREDENTIALS_TTL_MARGIN_S,
    FINAL_UPLOAD_S,
    credentials_ttl_s,
    lease_within_credentials,
    needs_new_credentials,
)
from functions.domain.heartbeat_decision import decide_lease
from functions.domain.job import Generation, new_job
from functions.domain.jobspec import Policy, parse_job
from tests.integration.api.helpers import SPEC, credentials
from tests.unit.domain.test_job_domain import make_job, request

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("lease_window_s", "ttl"),
    [
        (3 * 3600, 3 * 3600 + 900),  # the default: the lease plus a quarter hour, no more
        (120, 1020),
        (10, 910),
        (7 * 86_400, 604_800),  # Cloudflare's maximum
    ],
)
def test_keys_outlive_the_longest_lease_by_the_margin_only(lease_window_s: int, ttl: int) -> None:
    assert CREDENTIALS_TTL_MARGIN_S == 900
    policy = Policy(lease_window_s=lease_window_s, heartbeat_timeout_s=6, heartbeat_interval_s=1)
    assert credentials_ttl_s(policy) == ttl


@pytest.mark.parametrize(
    ("expires_in", "renew"),
    [(None, True), (3 * 3600 + 119, True), (3 * 3600 + 120, False), (3 * 3600 + 900, False)],
)
def test_renewed_once_a_lease_granted_now_could_outlive_them(
    expires_in: float | None, renew: bool
) -> None:
    creds = None if expires_in is None else credentials(NOW + expires_in)
    generation = Generation(job_id="j", generation=1, token_hash="h", credentials=creds)
    assert needs_new_credentials(generation, Policy(), NOW, interval_s=60) is renew


@pytest.mark.parametrize(
    ("lease", "expires", "cut"),
    [
        (NOW + 3600, NOW + 7200, NOW + 3600),  # fresh keys: the lease as it is
        (NOW + 3600, NOW + 3600, NOW + 3600 - FINAL_UPLOAD_S),  # time left for a final upload
        (NOW + 3600, NOW + 100, NOW),  # keys about to lapse: stop now, still able to save
    ],
)
def test_a_lease_ends_while_the_keys_still_allow_a_final_upload(
    lease: float, expires: float, cut: float
) -> None:
    assert FINAL_UPLOAD_S == 300
    assert lease_within_credentials(lease, expires, NOW) == cut


def test_the_heartbeat_never_grants_a_lease_past_the_generations_keys() -> None:
    """Both rules hold: a lease is renewed only while the generation was supervised recently,
    and a renewed one ends `FINAL_UPLOAD_S` before the generation's keys."""
    job = make_job()  # window 3 h, budget for far longer at this price
    unrenewed = Generation(
        job_id=job.job_id, generation=1, token_hash="h", usd_per_hour=0.01,
        credentials=credentials(NOW + 1800), supervised_at=NOW, lease_expires_at=NOW + 60,
    )  # fmt: skip
    decision = decide_lease(job, unrenewed, request(), now=NOW, supervised_max_age_s=180)
    assert decision.lease_expires_at == NOW + 1800 - FINAL_UPLOAD_S
    fresh = unrenewed.model_copy(update={"credentials": credentials(NOW + 4 * 3600)})
    decision = decide_lease(job, fresh, request(), now=NOW, supervised_max_age_s=180)
    assert decision.lease_expires_at == NOW + 3 * 3600
    stale = fresh.model_copy(update={"supervised_at": NOW - 181})
    decision = decide_lease(job, stale, request(), now=NOW, supervised_max_age_s=180)
    assert decision.lease_expires_at == NOW + 60 and not decision.lease_renewed
    assert decision.credentials is None


def test_the_example_policy_keeps_both_coherent() -> None:
    job, _ = new_job(parse_job(SPEC), job_id="j-1", now=NOW, submitted_by="me")
    ttl = credentials_ttl_s(job.spec.policy)
    assert job.spec.policy.lease_window_s + FINAL_UPLOAD_S < ttl
