"""The provision step, in the monitor's shape: gather → decide (pure) → apply → record.

1. gather: the job, stray instances of an earlier attempt of this step, the market, the job's
   generations, the reputations of the offered hosts and the pace and start-up learned for the
   job's name (`functions/domain/pace.py`);
2. decide: `functions.domain.rent.plan_rent` — the offers to try, best expected total first, or
   a refusal (no offer qualifies → wait for capacity; the budget would not cover start-up and
   one checkpoint → stop the job);
3. rent down the plan: mint the generation's credentials once (read-only on the job's prefix,
   read-write on its own `g<generation>/`; recorded with the generation, the agent gets them in
   its first heartbeat's reply with the rest of its job, `functions/domain/job_bootstrap.py`),
   then per offer a fresh agent token and the instance environment that bootstraps the agent;
   an offer taken meanwhile → the next one; none left → wait; a request Vast refuses for its
   arguments (over one of its create-instance bounds, or 400 `invalid_args`) → no other offer
   is tried: the outcome `rent_refused` fails the job with the field and the bound (the state
   machine's Fail);
4. record the generation with a conditional write; a lost race destroys what was rented.

The step's time budget. The function times out after 180 s (`infra/constructs/lifecycle.py`);
a step killed mid-rent is run again (Retry on `Sandbox.Timedout`) and destroys what it left
unrecorded, but it must not depend on that. One Vast call takes at most its retry deadline plus
one request's timeout (a request started just before the deadline): 20 + 10 = 30 s with the
lifecycle's settings. Before the keys: the stray list (30 s; one page per 25 instances),
destroying a stray (30 s, normally none), the offer search (30 s) and DynamoDB reads (about
2 s): at worst 92 s. Minting the generation's two R2 keys takes two Cloudflare calls (30 s
deadline + 20 s timeout = 50 s each): at worst 100 s, so they are minted only while
`mint_reserve_s` (100 s) is left. One rent: the rent itself (30 s), the instance list after an
unsure answer (30 s), the record and, after a lost race, the destroy (30 s) and two DynamoDB
writes: at worst 90 s plus about 5 s. So a rent is started only while `rent_reserve_s` (3 calls
+ 10 s = 100 s) is left (`RentBudget`); otherwise the step stops trying offers (no capacity: it
waits and tries again, counted against the provision timeout). The worst step therefore ends by
max(92 + 2, 180 − 100 + 100, 180 − 100 + 100) = 180 s, and with Vast and Cloudflare answering
at their usual pace every offer of the plan (`MAX_OFFERS_PER_ATTEMPT`, 5) is tried.
`tests/integration/lifecycle/test_provision_budget.py` measures it against a Vast and a
Cloudflare that answer each request only after its full timeout: 120.8 s, stopping before a
rent (221.8 s without the budget).
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.adapters.cloudflare import mint_job_credentials
from functions.adapters.vast import (
    BidTooLow,
    OfferGone,
    RentResult,
    VastClient,
    VastInvalidArgs,
    VastUnavailable,
)
from functions.domain.agent_token import hash_token, new_agent_token
from functions.domain.credentials import credentials_ttl_s
from functions.domain.heartbeat_contract import StorageCredentials
from functions.domain.job import Generation, Job, JobState
from functions.domain.job_events import JobTransitionEvent
from functions.domain.labels import instance_label
from functions.domain.onstart import (
    build_host_env,
    build_onstart,
    ensure_no_account_secrets,
    launch_mode,
)
from functions.domain.pace import prior_steps_per_hour
from functions.domain.rent import (
    Refusal,
    RentCandidate,
    RentPlan,
    capacity_attempt,
    capacity_wait_s,
    plan_rent,
)
from functions.domain.spend import prices_record
from functions.lifecycle.steps import (
    RENTING,
    LifecycleDeps,
    ProvisionInput,
    ProvisionOutput,
    logged_listing,
    timeline_event,
    transition_and_publish,
)

PROVISION_TIMEOUT_S = 3600  # of waiting for capacity, then the job FAILS
WHEEL_URL_TTL_S = 6 * 3600  # the onstart script may retry the download for a while


def provision(deps: LifecycleDeps, inp: ProvisionInput) -> ProvisionOutput:
    """Rent the job's next generation (the module docstring has the steps)."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return ProvisionOutput(outcome="abandon", proceed=False, message="no such job")
    if job.current_generation == inp.generation:  # a retried step that already recorded
        done = deps.store.get_generation(inp.job_id, inp.generation)
        if done is not None and done.is_current:
            return _rented(done, "already rented", inp.waited_s)
    if job.state not in RENTING or job.current_generation != inp.generation - 1:
        return ProvisionOutput(
            outcome="abandon", proceed=False, state=job.state.value,
            message=f"job is {job.state.value}: not renting generation {inp.generation}",
        )  # fmt: skip
    vast = deps.vast()
    _destroy_strays(vast, instance_label(job.job_id, inp.generation))
    offers = logged_listing(vast.search_offers(job.spec.resources), "offer search")
    generations = deps.store.list_generations(job.job_id)
    machines = [o.machine_id for o in offers if o.machine_id is not None]
    plan = plan_rent(
        job, offers, generation=inp.generation, generations=generations,
        reputations=deps.store.host_reputations(machines), now=now,
        measures=deps.store.job_measures(job.name),
    )  # fmt: skip
    if isinstance(plan, Refusal):
        return _refused(deps, job, inp, now, plan)
    return _rent_down(deps, vast, job, inp, plan, now)


def _destroy_strays(vast: VastClient, label: str) -> None:
    """An earlier attempt of this step may have rented and died before recording: not ours to
    adopt (its agent token is lost), so it goes before we rent again."""
    for stray in logged_listing(vast.list_instances(label=label), "stray instances"):
        if stray.label == label:
            vast.destroy_instance(stray.id)


def _refused(
    deps: LifecycleDeps, job: Job, inp: ProvisionInput, now: float, refusal: Refusal
) -> ProvisionOutput:
    if refusal.outcome == "no_capacity":
        return _no_capacity(deps, job, inp, now, refusal.reason)
    stopped = transition_and_publish(
        deps, job, JobState.STOPPING, RENTING, now, "over_budget", refusal.reason,
        stop_reason="over_budget", state_reason=refusal.reason,
    )  # fmt: skip
    return ProvisionOutput(outcome="over_budget", message=refusal.reason, state=stopped.state.value)


def _rent_down(
    deps: LifecycleDeps, vast: VastClient, job: Job, inp: ProvisionInput, plan: RentPlan, now: float
) -> ProvisionOutput:
    """Try the plan's offers in order until one rents; then record it."""
    spec = job.spec
    budget = RentBudget(deps.settings.vast_deadline_s, deps.settings.vast_timeout_s)
    if not budget.fits_mint(deps.remaining_s()):
        why = "out of time in this step before minting the storage keys (Vast is slow)"
        return _no_capacity(deps, job, inp, now, why)
    cloudflare, account = deps.cloudflare()
    storage = mint_job_credentials(
        cloudflare, account, job.job_id, inp.generation, ttl_s=credentials_ttl_s(spec.policy),
        lease_s=spec.policy.lease_window_s, endpoint=account.r2_endpoint(deps.settings.r2_endpoint),
    )  # fmt: skip
    onstart = build_onstart(agent_wheel_url=deps.artifacts().presign_agent_wheel(WHEEL_URL_TTL_S))
    account_secrets = deps.account_secrets()
    for tried, candidate in enumerate(plan.candidates):
        if not budget.fits(deps.remaining_s()):
            why = f"out of time in this step after {tried} offer(s) (Vast is slow)"
            return _no_capacity(deps, job, inp, now, why)
        offer = candidate.offer
        token = new_agent_token()
        env = build_host_env(
            spec, job_id=job.job_id, generation=inp.generation, api_url=deps.settings.api_url,
            agent_token=token, lease_expires_at=candidate.lease_expires_at,
            checkpoint_interval_s=_interval_s(candidate),
        )  # fmt: skip
        ensure_no_account_secrets(
            script=onstart, env=env, account_secrets=account_secrets, job=spec
        )
        try:
            result = vast.rent(
                offer.id, image=spec.image, disk_gb=plan.disk_gb, label=plan.label, env=env,
                onstart=onstart, price=candidate.bid_usd_per_hour, runtype=launch_mode(spec),
            )  # fmt: skip
        except VastInvalidArgs as exc:  # every offer would refuse the same request
            return _rent_refused(deps, job, offer.id, now, exc)
        except BidTooLow as exc:  # min_bid rose past our bid: the offer is gone at our price
            deps.store.append_event(
                timeline_event(job.job_id, now, "bid_too_low", f"offer {offer.id} refused bid "
                               f"${candidate.bid_usd_per_hour}/h ({exc.message}); next offer",
                               offer_id=offer.id)
            )  # fmt: skip
            continue
        except OfferGone:
            deps.store.append_event(
                timeline_event(job.job_id, now, "offer_gone",
                               f"offer {offer.id} was taken; next offer", offer_id=offer.id)
            )  # fmt: skip
            continue
        except VastUnavailable as exc:
            found = _rented_anyway(vast, plan.label) if exc.maybe_applied else None
            if found is None:
                raise
            result = found
        return _record(deps, vast, job, inp, candidate, hash_token(token), storage, result, now)
    return _no_capacity(deps, job, inp, now, "every qualifying offer tried was taken")


def _rent_refused(
    deps: LifecycleDeps, job: Job, offer_id: int, now: float, refused: VastInvalidArgs
) -> ProvisionOutput:
    """The rent's arguments break Vast's bounds: nothing was rented, and no offer would take
    them. The job fails with the field and the bound (the Fail step records it)."""
    how = (
        "over Vast's create-instance limits, not sent"
        if refused.status is None
        else f"Vast answered {refused.status} {refused.code}"
    )
    message = (
        f"Vast refuses this job's create-instance request ({how}): {refused.message}; "
        "nothing was rented"
    )
    deps.store.append_event(
        timeline_event(job.job_id, now, "rent_refused", message, offer_id=offer_id,
                       field=refused.field, status=refused.status)
    )  # fmt: skip
    return ProvisionOutput(
        outcome="rent_refused", message=message, state=job.state.value, field=refused.field
    )


# --- the step's time budget (module docstring) --------------------------------------------

RENT_VAST_CALLS = 3  # the rent, the list after an unsure answer, the destroy after a lost race
RENT_MARGIN_S = 10.0  # the DynamoDB writes of a rent, and the step's last event
KEYS_MINTED = 2  # a generation's read key and write key: one Cloudflare call each
CLOUDFLARE_CALL_WORST_S = 30.0 + 20.0  # the factory's deadline + one request's timeout


@dataclass(frozen=True)
class RentBudget:
    """Whether minting the keys, or another rent, fits in what is left of the invocation."""

    vast_deadline_s: float
    vast_timeout_s: float

    @property
    def vast_call_worst_s(self) -> float:
        return self.vast_deadline_s + self.vast_timeout_s

    @property
    def rent_reserve_s(self) -> float:
        return RENT_VAST_CALLS * self.vast_call_worst_s + RENT_MARGIN_S

    @property
    def mint_reserve_s(self) -> float:
        return KEYS_MINTED * CLOUDFLARE_CALL_WORST_S

    def fits(self, remaining_s: float) -> bool:
        return remaining_s >= self.rent_reserve_s

    def fits_mint(self, remaining_s: float) -> bool:
        """The generation's keys can still be minted within what is left."""
        return remaining_s >= self.mint_reserve_s


def _record(
    deps: LifecycleDeps,
    vast: VastClient,
    job: Job,
    inp: ProvisionInput,
    candidate: RentCandidate,
    token_hash: str,
    storage: StorageCredentials,
    result: RentResult,
    now: float,
) -> ProvisionOutput:
    """Make the rented instance the job's current generation, unless someone else won."""
    offer, prices = candidate.offer, candidate.prices
    generation = Generation(
        job_id=job.job_id,
        generation=inp.generation,
        status="provisioning",
        token_hash=token_hash,
        instance_id=result.instance_id,
        offer_id=offer.id,
        machine_id=offer.machine_id,
        gpu_name=offer.gpu_name or None,
        gpu_count=offer.num_gpus,
        inet_down_mbps=offer.inet_down,
        prior_steps_per_hour=prior_steps_per_hour(job.spec, offer),
        dlperf=offer.dlperf,
        reliability=offer.reliability_score,
        usd_per_hour=prices.usd_per_hour,
        prices=prices_record(prices),
        created_at=now,
        lease_expires_at=candidate.lease_expires_at,
        credentials=storage,
        interruptible=candidate.bid_usd_per_hour is not None,
        bid_usd_per_hour=candidate.bid_usd_per_hour,
    )
    message = (
        f"rented instance {result.instance_id} (offer {offer.id}, machine "
        f"{offer.machine_id}, {offer.gpu_name}) at ${prices.usd_per_hour:.3f}/h"
        f"{_market(candidate)}; "
        f"expected total ${candidate.expected_total_usd:.2f}{_assumed(candidate)}"
    )
    if candidate.checkpoint_interval is not None:
        interval = candidate.checkpoint_interval
        message += f"; checkpoint every {interval.minutes:.1f} min ({interval.detail})"
    recorded = deps.store.record_generation(
        generation,
        expected=RENTING,
        now=now,
        event=timeline_event(
            job.job_id, now, "rented", message, instance_id=result.instance_id,
            machine_id=offer.machine_id, gpu_name=offer.gpu_name, **_assumed_data(candidate),
        ),
    )  # fmt: skip
    if recorded:
        # record_generation moved the job from the renting state it was checked in.
        deps.events.publish(
            JobTransitionEvent(
                job_id=job.job_id, from_state=job.state, to=JobState.RUNNING,
                reason=message, at=now, generation=inp.generation,
            )
        )  # fmt: skip
        return _rented(generation, message, inp.waited_s)
    vast.destroy_instance(result.instance_id)
    found_job = deps.store.get_job(job.job_id)
    lost = (
        f"lost the race for generation {inp.generation} (job is "
        f"{found_job.state.value if found_job else 'gone'}); destroyed instance "
        f"{result.instance_id}"
    )
    deps.store.append_event(
        timeline_event(job.job_id, now, "lost_race", lost, instance_id=result.instance_id)
    )
    return ProvisionOutput(outcome="lost_race", proceed=False, message=lost)


def _interval_s(candidate: RentCandidate) -> int | None:
    interval = candidate.checkpoint_interval
    return None if interval is None else interval.seconds


def _market(candidate: RentCandidate) -> str:
    bid = candidate.bid_usd_per_hour
    return "" if bid is None else f", interruptible (bid ${bid:.3f}/h)"


def _assumed(candidate: RentCandidate) -> str:
    """The hours and start-up the plan assumed on this host, and where they came from."""
    speed, startup = candidate.speed, candidate.startup
    if speed is None or startup is None:
        return ""
    return (
        f" ({speed.hours:.2f} h from {speed.source}"
        + (f", {speed.runs} run(s)" if speed.runs else "")
        + f"; start-up {startup.minutes:.1f} min from {startup.source}"
        + (f", {startup.runs} run(s)" if startup.runs else "")
        + ")"
    )


def _assumed_data(candidate: RentCandidate) -> dict[str, float | int | str]:
    speed, startup = candidate.speed, candidate.startup
    if speed is None or startup is None:
        return {}
    return {
        "expected_hours": speed.hours, "hours_source": speed.source, "hours_runs": speed.runs,
        "startup_min": startup.minutes, "startup_source": startup.source,
        "startup_runs": startup.runs,
    }  # fmt: skip


def _rented_anyway(vast: VastClient, label: str) -> RentResult | None:
    """After a rent that may have reached Vast: the instance with our label, if it exists."""
    for instance in logged_listing(
        vast.list_instances(label=label), "instances after an unsure rent"
    ):
        if instance.label == label:
            return RentResult(instance_id=instance.id)
    return None


def _rented(generation: Generation, message: str, waited_s: float) -> ProvisionOutput:
    return ProvisionOutput(
        outcome="rented",
        message=message,
        state=JobState.RUNNING.value,
        waited_s=waited_s,
        instance_id=generation.instance_id,
        offer_id=generation.offer_id,
        machine_id=generation.machine_id,
        usd_per_hour=generation.usd_per_hour,
    )


def _no_capacity(
    deps: LifecycleDeps, job: Job, inp: ProvisionInput, now: float, why: str
) -> ProvisionOutput:
    wait = capacity_wait_s(capacity_attempt(inp.waited_s))
    timed_out = inp.waited_s + wait > PROVISION_TIMEOUT_S
    message = (
        f"{why}; gave up after waiting {inp.waited_s:.0f} s (provision timeout "
        f"{PROVISION_TIMEOUT_S} s)"
        if timed_out
        else f"{why}; trying again in {wait} s"
    )
    deps.store.append_event(timeline_event(job.job_id, now, "no_capacity", message))
    return ProvisionOutput(
        outcome="no_capacity",
        message=message,
        wait_s=wait,
        waited_s=inp.waited_s + wait,
        timed_out=timed_out,
        state=job.state.value,
    )
