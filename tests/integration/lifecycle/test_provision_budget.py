"""The provision step's worst case against its Lambda timeout (180 s), measured: the real step,
the real Vast and Cloudflare clients with the lifecycle's settings, the simulators behind an
adversary that makes every request take its whole timeout and answers "busy" until a call's
retries are nearly spent. Time is a fake monotonic clock that requests and back-off sleeps
advance, so the numbers are exact and the test takes no time.

The analysis these measurements back is in `functions/lifecycle/provision.py` ("The step's
time budget"): one Vast call ≤ deadline + timeout = 30 s, one Cloudflare call ≤ 50 s; the
generation's two keys are minted only while 100 s are left, a rent is started only while 100 s
are left, so the step ends by 180 s.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from functions.adapters import factory
from functions.adapters.cloudflare import CloudflareAccount, CloudflareClient
from functions.adapters.vast import MAX_BACKOFF_S, VastClient, VastUnavailable
from functions.domain.job import Job, JobState, TimelineEvent
from functions.domain.rent import MAX_OFFERS_PER_ATTEMPT
from functions.lifecycle.provision import RentBudget, provision
from functions.lifecycle.steps import LifecycleDeps, ProvisionInput, ProvisionOutput
from functions.settings import LifecycleSettings, load_settings
from infra import names
from tests.integration.supervision_harness import (
    BUCKET,
    CLOUDFLARE_ACCOUNT,
    CLOUDFLARE_TOKEN,
    PARENT_KEY,
    Supervised,
    logical_id_by_handler,
)

LAMBDA_TIMEOUT_S = 180  # infra/constructs/lifecycle.py
CLOUDFLARE_TIMEOUT_S = 20.0  # the factory's httpx client
CLOUDFLARE_DEADLINE_S = 30.0  # CloudflareClient's default
CLOUDFLARE_MAX_BACKOFF_S = 5.0


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Adversary:
    """A transport: every request takes `timeout_s`; a call is answered `busy` while another
    retry would still fit its deadline, then as the simulator answers (so each call lasts
    about as long as its client lets it)."""

    def __init__(
        self,
        clock: Monotonic,
        handle: Callable[[httpx.Request], httpx.Response],
        *,
        timeout_s: float,
        deadline_s: float,
        max_backoff_s: float,
        busy: int | None,
    ) -> None:
        self.clock, self.handle, self.busy = clock, handle, busy
        self.timeout_s, self.deadline_s, self.max_backoff_s = timeout_s, deadline_s, max_backoff_s
        self.call_started: float | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.call_started is None:
            self.call_started = self.clock.now
        self.clock.sleep(self.timeout_s)
        retry_fits = self.clock.now - self.call_started + self.max_backoff_s <= self.deadline_s
        if self.busy is not None and retry_fits:
            return httpx.Response(self.busy, text="busy")
        self.call_started = None
        return self.handle(request)


def deps(
    sup: Supervised,
    clock: Monotonic,
    *,
    busy: bool,
    budgeted: bool = True,
    slow_cloudflare: bool = True,
    budget_s: float = LAMBDA_TIMEOUT_S,
) -> LifecycleDeps:
    lambda_client = sup.aws.client("lambda")
    arn = sup.deployed.function_arn(logical_id_by_handler(sup.template, names.LIFECYCLE_HANDLER))
    env = lambda_client.get_function_configuration(FunctionName=arn)["Environment"]["Variables"]
    settings = load_settings(LifecycleSettings, env)
    vast_adversary = Adversary(
        clock,
        sup.vast.handle,
        timeout_s=settings.vast_timeout_s,
        deadline_s=settings.vast_deadline_s,
        max_backoff_s=MAX_BACKOFF_S,
        busy=429 if busy else None,
    )
    vast = VastClient(
        sup.vast.api_key,
        client=httpx.Client(transport=httpx.MockTransport(vast_adversary)),
        deadline_s=settings.vast_deadline_s,
        timeout_s=settings.vast_timeout_s,
        sleep=clock.sleep,
        monotonic=clock,
        rng=random.Random(0),
    )
    cloudflare_adversary = Adversary(
        clock,
        sup.cloudflare.handle,
        timeout_s=CLOUDFLARE_TIMEOUT_S if slow_cloudflare else 0.0,
        deadline_s=CLOUDFLARE_DEADLINE_S,
        max_backoff_s=CLOUDFLARE_MAX_BACKOFF_S,
        busy=503 if busy else None,
    )
    cloudflare = CloudflareClient(
        CLOUDFLARE_ACCOUNT,
        CLOUDFLARE_TOKEN,
        client=httpx.Client(transport=httpx.MockTransport(cloudflare_adversary)),
        deadline_s=CLOUDFLARE_DEADLINE_S,
        sleep=clock.sleep,
        monotonic=clock,
        wall_clock=sup.clock,
        rng=random.Random(0),
    )
    account = CloudflareAccount(CLOUDFLARE_ACCOUNT, CLOUDFLARE_TOKEN, PARENT_KEY, BUCKET)
    started = clock.now
    return LifecycleDeps(
        settings=settings,
        store=sup.store,
        vast=lambda: vast,
        cloudflare=lambda: (cloudflare, account),
        artifacts=lambda: factory.artifacts(settings.artifacts_bucket),
        account_secrets=lambda: [sup.vast.api_key, CLOUDFLARE_TOKEN],
        clock=sup.clock,
        remaining_s=(lambda: budget_s - (clock.now - started))
        if budgeted
        else (lambda: float("inf")),
    )


def provisioning(sup: Supervised) -> Job:
    job = sup.submit()
    return sup.store.transition_job(
        job.job_id,
        JobState.PROVISIONING,
        expected=[JobState.PENDING],
        now=sup.clock(),
        event=TimelineEvent(job_id=job.job_id, at=sup.clock(), kind="provisioning", message="t"),
    )


def step(sup: Supervised, clock: Monotonic, **kwargs: Any) -> tuple[ProvisionOutput, float]:
    job = provisioning(sup)
    started = clock.now
    out = provision(
        deps(sup, clock, **kwargs), ProvisionInput(op="provision", job_id=job.job_id, generation=1)
    )
    return out, clock.now - started


def test_the_budget_numbers_for_the_lifecycles_vast_settings() -> None:
    settings = LifecycleSettings.model_fields
    assert settings["vast_deadline_s"].default == 20 and settings["vast_timeout_s"].default == 10
    budget = RentBudget(vast_deadline_s=20, vast_timeout_s=10)
    assert budget.vast_call_worst_s == 30 and budget.rent_reserve_s == 100
    assert budget.fits(100) and not budget.fits(99.9)
    assert budget.mint_reserve_s == 100  # two keys, each a Cloudflare call of at most 30 + 20 s
    assert budget.fits_mint(100) and not budget.fits_mint(99.9)


def test_a_vast_call_lasts_at_most_its_deadline_plus_one_request_timeout(sup: Supervised) -> None:
    clock = Monotonic()
    vast = deps(sup, clock, busy=True).vast()
    sup.vast.outage()  # behind the adversary: each call's last answer is a 502 as well
    started = clock.now
    with pytest.raises(VastUnavailable):
        vast.list_instances()
    took = clock.now - started
    assert took <= RentBudget(20, 10).vast_call_worst_s
    assert took == pytest.approx(20.2, abs=0.5)  # the adversary answers before the worst


def test_the_worst_provision_step_ends_within_the_lambda_timeout(sup: Supervised) -> None:
    """Every request takes its whole timeout and every call its whole retry budget, and every
    offer it tries is gone. Measured: 120.8 s before the first rent could start (the stray
    list and the search 20.2 s each, each of the two keys 40.3 s), which leaves less than a
    rent's 100 s reserve: the step stops there and waits for another try."""
    sup.vast.inject("offer_gone", 100)
    out, took = step(sup, Monotonic(), busy=True)

    assert took <= LAMBDA_TIMEOUT_S
    assert took == pytest.approx(120.8, abs=1)
    assert out.outcome == "no_capacity"
    assert "out of time in this step after 0 offer(s)" in out.message
    assert sup.rents() == 0


def test_without_the_budget_the_same_step_would_outlive_its_lambda(sup: Supervised) -> None:
    sup.vast.inject("offer_gone", 100)
    out, took = step(sup, Monotonic(), busy=True, budgeted=False)

    assert out.outcome == "no_capacity" and sup.rents() == MAX_OFFERS_PER_ATTEMPT
    assert took > LAMBDA_TIMEOUT_S  # measured 221.8 s: 120.8 s + 5 rents × 20.2 s


def test_a_slow_vast_still_gets_every_offer_of_the_plan_tried(sup: Supervised) -> None:
    """Every Vast request takes its whole timeout but is answered at once: 10 s a call."""
    sup.vast.inject("offer_gone", 100)
    out, took = step(sup, Monotonic(), busy=False, slow_cloudflare=False)

    assert sup.rents() == MAX_OFFERS_PER_ATTEMPT and out.outcome == "no_capacity"
    assert took <= LAMBDA_TIMEOUT_S
    assert took == pytest.approx(10 + 10 + MAX_OFFERS_PER_ATTEMPT * 10, abs=1)


def test_a_slow_vast_and_a_slow_cloudflare_try_what_fits_and_wait_for_another_try(
    sup: Supervised,
) -> None:
    """Cloudflare slow too (20 s a request): the two keys take 40 s, and three offers fit in
    what is left before a rent's 100 s reserve; the others wait for the step's next try."""
    sup.vast.inject("offer_gone", 100)
    out, took = step(sup, Monotonic(), busy=False)

    assert sup.rents() == 3 and out.outcome == "no_capacity"
    assert "out of time in this step after 3 offer(s)" in out.message
    assert took <= LAMBDA_TIMEOUT_S
    assert took == pytest.approx(10 + 10 + 2 * 20 + 3 * 10, abs=1)


def test_a_step_without_time_for_the_keys_stops_before_minting_them(sup: Supervised) -> None:
    """Less than the keys' 100 s reserve left after the stray list and the search: nothing is
    minted (it could outlive the invocation) and nothing rented; the step waits for another
    try."""
    out, took = step(sup, Monotonic(), busy=True, budget_s=130)

    assert out.outcome == "no_capacity" and sup.rents() == 0
    assert "before minting the storage keys" in out.message
    # the stray list and the search only: no Cloudflare call (each takes at least 20 s here)
    assert took == pytest.approx(40.4, abs=1)


def test_a_slow_vast_rents_within_the_budget(sup: Supervised) -> None:
    out, took = step(sup, Monotonic(), busy=False)

    assert out.outcome == "rented" and sup.rents() == 1
    assert took <= LAMBDA_TIMEOUT_S
