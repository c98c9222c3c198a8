"""The lifecycle's task steps, apart from Lambda: each takes a typed input and its adapters.

The state machine (`infra/constructs/lifecycle.py`) runs them in this order:

- provision / replace: `begin` → (replace: `destroy` the older generations) → `provision`
  (plan, budget check, mint credentials, rent, record) → notify; no capacity → Wait and
  `provision` again until the provision timeout → `fail`.
- stop: `stop_begin` → `destroy` every instance of the job → `finish` → notify.

Every step is idempotent: Step Functions may run a task twice (Retry after a timeout), and an
execution may be started again by the monitor after a lost start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.adapters.cloudflare import CloudflareClient
from functions.adapters.factory import CloudflareAccount
from functions.adapters.notify import JobEvents
from functions.adapters.store import JobStore, StateConflict
from functions.adapters.vast import OfferGone, RentResult, VastClient, VastUnavailable
from functions.domain.agent_token import hash_token, new_agent_token
from functions.domain.cost import NoQualifyingOffer, plan_job
from functions.domain.health import BLAMES_HOST, Health
from functions.domain.heartbeat import StorageCredentials
from functions.domain.job import (
    TERMINAL_STATE_FOR,
    Generation,
    Job,
    JobState,
    TimelineEvent,
    TransitionAction,
    is_terminal,
)
from functions.domain.job_events import JobTransitionEvent, transition_event
from functions.domain.onstart import build_host_env, build_onstart, ensure_no_account_secrets
from functions.domain.spend import GenerationPrices, lease_expires_at
from functions.domain.supervision import (
    blocklist,
    budget_allows_rent,
    capacity_attempt,
    capacity_wait_s,
    credentials_ttl_s,
    instance_label,
    parse_label,
    prices_record,
    reason_health,
    stop_reason_for,
)
from functions.settings import LifecycleSettings

MAX_OFFERS_PER_ATTEMPT = 5  # offers tried in one provision step before waiting for capacity
PROVISION_TIMEOUT_S = 3600  # of waiting for capacity, then the job FAILS
WHEEL_URL_TTL_S = 6 * 3600  # the onstart script may retry the download for a while
RENTING = (JobState.PROVISIONING, JobState.REPLACING)


class InstancesStillPresent(Exception):
    """Vast still lists instances we destroyed: the state machine retries the destroy."""


# --- inputs and outputs ---------------------------------------------------------------------


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BeginInput(_Input):
    op: Literal["begin"]
    action: TransitionAction
    job_id: str
    generation: int = Field(ge=1)
    reason: str


class DestroyInput(_Input):
    op: Literal["destroy"]
    job_id: str
    below_generation: int | None = Field(
        default=None, ge=1, description="Destroy generations below this one; None: all."
    )


class ProvisionInput(_Input):
    op: Literal["provision"]
    job_id: str
    generation: int = Field(ge=1)
    waited_s: float = Field(default=0, ge=0, description="Back-off waited for capacity so far.")


class FailInput(_Input):
    op: Literal["fail"]
    job_id: str
    reason: str = ""
    error: dict[str, Any] | None = Field(default=None, description="A Catch's Error and Cause.")


class StopBeginInput(_Input):
    op: Literal["stop_begin"]
    job_id: str
    reason: str


class FinishInput(_Input):
    op: Literal["finish"]
    job_id: str


LifecycleInput = Annotated[
    BeginInput | DestroyInput | ProvisionInput | FailInput | StopBeginInput | FinishInput,
    Field(discriminator="op"),
]


class StepOutput(BaseModel):
    proceed: bool = True
    outcome: str
    message: str = ""
    state: str | None = None


class ProvisionOutput(StepOutput):
    outcome: Literal["rented", "no_capacity", "over_budget", "lost_race", "abandon"]
    waited_s: float = 0
    wait_s: int = 0
    timed_out: bool = False
    instance_id: int | None = None
    offer_id: int | None = None
    machine_id: int | None = None
    usd_per_hour: float | None = None


@dataclass
class LifecycleDeps:
    settings: LifecycleSettings
    store: JobStore
    vast: Callable[[], VastClient]
    cloudflare: Callable[[], tuple[CloudflareClient, CloudflareAccount]]
    presign_wheel: Callable[[], str]
    account_secrets: Callable[[], list[str]]
    clock: Callable[[], float]
    events: JobEvents = field(default_factory=lambda: JobEvents(None))


def _event(job_id: str, now: float, kind: str, message: str, **data: Any) -> TimelineEvent:
    return TimelineEvent(job_id=job_id, at=now, kind=kind, message=message, data=data)


# --- begin ----------------------------------------------------------------------------------


def begin(deps: LifecycleDeps, inp: BeginInput) -> StepOutput:
    """Claim the job for this transition: PENDING → PROVISIONING, RUNNING → REPLACING (the
    old generation is superseded, so its agent stops at its next heartbeat; it ends when
    `destroy` has seen its instance gone)."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    previous = inp.generation - 1
    if job.current_generation != previous:
        return _skip(job, f"generation {inp.generation} is not next")
    if inp.action == "provision":
        if job.state == JobState.PENDING:
            job = _transition(
                deps, job, JobState.PROVISIONING, (JobState.PENDING,), now, "provisioning",
                f"looking for a host: {inp.reason}",
            )  # fmt: skip
        if job.state != JobState.PROVISIONING:
            return _skip(job, "not pending")
        return StepOutput(outcome="begun", state=job.state.value)
    if job.state == JobState.RUNNING:
        health = reason_health(inp.reason)
        updates: dict[str, Any] = {"state_reason": inp.reason}
        if health is Health.CRASHED:
            updates["restarts"] = job.restarts + 1
        job = _transition(
            deps, job, JobState.REPLACING, (JobState.RUNNING,), now, "replacing",
            f"replacing generation {previous}: {inp.reason}", updates=updates,
        )  # fmt: skip
    if job.state != JobState.REPLACING:
        return _skip(job, "not running")
    health = reason_health(inp.reason)
    deps.store.update_generation(
        job.job_id,
        previous,
        # Not `ended_at` yet: the generation ends when DestroyPrevious has seen its instance
        # gone. Until then it may still finish a checkpoint upload, which is then a checkpoint
        # of a generation that existed, and restorable (invariant 2).
        {"is_current": False, "status": "superseded", "host_blamed": health in BLAMES_HOST},
    )
    return StepOutput(outcome="begun", state=job.state.value)


def _skip(job: Job, why: str) -> StepOutput:
    return StepOutput(
        proceed=False,
        outcome="abandon",
        state=job.state.value,
        message=f"nothing to do: job is {job.state.value} ({why})",
    )


def _transition(
    deps: LifecycleDeps,
    job: Job,
    target: JobState,
    expected: Iterable[JobState],
    now: float,
    kind: str,
    message: str,
    *,
    updates: dict[str, Any] | None = None,
) -> Job:
    """Move the job if it still is where we think; else return it as found (someone else —
    a cancel, another execution — moved it; the caller decides from its state)."""
    try:
        moved = deps.store.transition_job(
            job.job_id,
            target,
            expected=expected,
            now=now,
            event=_event(job.job_id, now, kind, message),
            updates=updates,
        )
    except StateConflict as exc:
        return exc.job if exc.job is not None else job
    deps.events.publish(transition_event(moved, reason=message, at=now))
    return moved


# --- destroy --------------------------------------------------------------------------------


def destroy(deps: LifecycleDeps, inp: DestroyInput) -> StepOutput:
    """Destroy the job's instances (all, or those of generations below `below_generation`):
    every instance Vast lists with the job's label and every instance id recorded on those
    generations. Raises InstancesStillPresent while Vast still lists one (Retry)."""
    vast = deps.vast()
    now = deps.clock()

    def doomed(label: str | None) -> bool:
        parsed = parse_label(label)
        if parsed is None or parsed[0] != inp.job_id:
            return False
        return inp.below_generation is None or parsed[1] < inp.below_generation

    generations = [
        g
        for g in deps.store.list_generations(inp.job_id)
        if inp.below_generation is None or g.generation < inp.below_generation
    ]
    targets = {i.id for i in vast.list_instances() if doomed(i.label)}
    targets |= {g.instance_id for g in generations if g.instance_id is not None}
    for instance_id in sorted(targets):
        vast.destroy_instance(instance_id)  # idempotent: gone counts as done
    remaining = sorted(i.id for i in vast.list_instances() if i.id in targets)
    if remaining:
        raise InstancesStillPresent(f"Vast still lists instances {remaining}; retrying")
    for g in generations:
        if g.ended_at is None or g.status not in ("superseded", "stopped", "failed"):
            deps.store.update_generation(
                inp.job_id,
                g.generation,
                {"ended_at": g.ended_at or now, "status": _ended_status(g)},
            )
    if targets:
        deps.store.append_event(
            _event(
                inp.job_id, now, "destroyed", f"destroyed instances {sorted(targets)}",
                instance_ids=sorted(targets),
            )
        )  # fmt: skip
    return StepOutput(outcome="destroyed", message=f"{len(targets)} instance(s) destroyed")


def _ended_status(generation: Generation) -> str:
    return "superseded" if not generation.is_current else "stopped"


# --- provision ------------------------------------------------------------------------------


def provision(deps: LifecycleDeps, inp: ProvisionInput) -> ProvisionOutput:
    """Plan, check the budget, mint credentials, rent (next offer when one is gone), record
    the generation with a conditional write. A lost race destroys what was rented."""
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
    spec = job.spec
    label = instance_label(job.job_id, inp.generation)
    # An earlier attempt of this step may have rented and died before recording: not ours to
    # adopt (its agent token is lost), so it goes before we rent again.
    for stray in vast.list_instances():
        if stray.label == label:
            vast.destroy_instance(stray.id)
    offers = vast.search_offers(spec.resources)
    generations = deps.store.list_generations(job.job_id)
    machines = [o.machine_id for o in offers if o.machine_id is not None]
    blocked = blocklist(generations, deps.store.host_reputations(machines), now=now)
    try:
        plan = plan_job(spec, offers, blocklist=blocked)
    except NoQualifyingOffer as exc:
        return _no_capacity(deps, job, inp, now, f"no offer qualifies: {exc.describe()}")
    affordable, why = budget_allows_rent(job, plan.ranking[0])
    if not affordable:
        stopped = _transition(
            deps, job, JobState.STOPPING, RENTING, now, "over_budget", why,
            updates={"stop_reason": "over_budget", "state_reason": why},
        )  # fmt: skip
        return ProvisionOutput(outcome="over_budget", message=why, state=stopped.state.value)
    cloudflare, account = deps.cloudflare()
    prefix = f"jobs/{job.job_id}/"
    minted = cloudflare.mint_temp_credentials(
        account.bucket,
        account.parent_access_key_id,
        prefix,
        credentials_ttl_s(spec.policy),
        lease_s=spec.policy.lease_window_s,
    )
    storage = StorageCredentials(
        access_key_id=minted.access_key_id,
        secret_access_key=minted.secret_access_key,
        session_token=minted.session_token,
        expires_at=minted.expires_at,
        endpoint=account.r2_endpoint(deps.settings.r2_endpoint),
        bucket=account.bucket,
        prefix=prefix,
    )
    onstart = build_onstart(agent_wheel_url=deps.presign_wheel())
    account_secrets = deps.account_secrets()
    disk_gb = spec.resources.min_disk_gb
    for choice in plan.ranking[:MAX_OFFERS_PER_ATTEMPT]:
        offer = choice.offer
        prices = GenerationPrices.from_offer(offer, disk_gb)
        lease_at = lease_expires_at(
            now,
            lease_window_s=spec.policy.lease_window_s,
            budget_usd=job.budget_usd,
            spent_usd=job.spent_usd,
            usd_per_hour=prices.usd_per_hour,
        )
        token = new_agent_token()
        env = build_host_env(
            spec, job_id=job.job_id, generation=inp.generation, api_url=deps.settings.api_url,
            agent_token=token, storage=storage, lease_expires_at=lease_at,
        )  # fmt: skip
        ensure_no_account_secrets(script=onstart, env=env, account_secrets=account_secrets)
        try:
            result = vast.rent(
                offer.id, image=spec.image, disk_gb=disk_gb, label=label, env=env, onstart=onstart
            )
        except OfferGone:
            deps.store.append_event(
                _event(job.job_id, now, "offer_gone", f"offer {offer.id} was taken; next offer",
                       offer_id=offer.id)
            )  # fmt: skip
            continue
        except VastUnavailable as exc:
            found = _rented_anyway(vast, label) if exc.maybe_applied else None
            if found is None:
                raise
            result = found
        generation = Generation(
            job_id=job.job_id,
            generation=inp.generation,
            status="provisioning",
            token_hash=hash_token(token),
            instance_id=result.instance_id,
            offer_id=offer.id,
            machine_id=offer.machine_id,
            usd_per_hour=prices.usd_per_hour,
            prices=prices_record(prices),
            created_at=now,
            lease_expires_at=lease_at,
            credentials=storage,
        )
        message = (
            f"rented instance {result.instance_id} (offer {offer.id}, machine "
            f"{offer.machine_id}, {offer.gpu_name}) at ${prices.usd_per_hour:.3f}/h; "
            f"expected total ${choice.expected_total_usd:.2f}"
        )
        recorded = deps.store.record_generation(
            generation,
            expected=RENTING,
            now=now,
            event=_event(job.job_id, now, "rented", message, instance_id=result.instance_id),
        )
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
            _event(job.job_id, now, "lost_race", lost, instance_id=result.instance_id)
        )
        return ProvisionOutput(outcome="lost_race", proceed=False, message=lost)
    return _no_capacity(deps, job, inp, now, "every qualifying offer tried was taken")


def _rented_anyway(vast: VastClient, label: str) -> RentResult | None:
    """After a rent that may have reached Vast: the instance with our label, if it exists."""
    for instance in vast.list_instances():
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
    deps.store.append_event(_event(job.job_id, now, "no_capacity", message))
    return ProvisionOutput(
        outcome="no_capacity",
        message=message,
        wait_s=wait,
        waited_s=inp.waited_s + wait,
        timed_out=timed_out,
        state=job.state.value,
    )


# --- fail / stop ----------------------------------------------------------------------------


def fail(deps: LifecycleDeps, inp: FailInput) -> StepOutput:
    """The transition could not get the job a host: FAILED with the reason."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    reason = inp.reason
    if inp.error:
        cause = str(inp.error.get("Cause", ""))[:500]
        reason = f"{reason or 'provisioning failed'}: {inp.error.get('Error', 'error')} {cause}"
    job = _transition(
        deps, job, JobState.FAILED, (JobState.PENDING, *RENTING), now, "failed", reason,
        updates={"stop_reason": "failed", "state_reason": reason},
    )  # fmt: skip
    return StepOutput(
        outcome="failed", state=job.state.value, message=f"job {job.job_id} FAILED: {reason}"
    )


def stop_begin(deps: LifecycleDeps, inp: StopBeginInput) -> StepOutput:
    """Any active job → STOPPING with the reason's outcome (a cancel has set it already)."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    if is_terminal(job.state):
        return _skip(job, "already ended")
    if job.state != JobState.STOPPING:
        stop_reason = stop_reason_for(inp.reason)
        job = _transition(
            deps, job, JobState.STOPPING,
            (JobState.PENDING, JobState.PROVISIONING, JobState.RUNNING, JobState.REPLACING),
            now, "stopping", f"stopping: {inp.reason}",
            updates={"stop_reason": stop_reason, "state_reason": inp.reason},
        )  # fmt: skip
    if job.state != JobState.STOPPING:
        return _skip(job, "already ended")
    return StepOutput(outcome="stopping", state=job.state.value)


def finish(deps: LifecycleDeps, inp: FinishInput) -> StepOutput:
    """STOPPING → the terminal state its stop reason names."""
    now = deps.clock()
    job = deps.store.get_job(inp.job_id)
    if job is None:
        return StepOutput(proceed=False, outcome="abandon", message="no such job")
    if job.state == JobState.STOPPING:
        target = TERMINAL_STATE_FOR[job.stop_reason or "cancelled"]
        job = _transition(
            deps, job, target, (JobState.STOPPING,), now, target.value.lower(),
            f"job ended {target.value}: {job.state_reason or job.stop_reason}",
        )  # fmt: skip
    spent = f"${job.spent_usd:.2f} of ${job.budget_usd:.2f}"
    return StepOutput(
        outcome="finished",
        state=job.state.value,
        message=f"job {job.job_id} ({job.name}) is {job.state.value}: "
        f"{job.state_reason or job.stop_reason or ''}; spent {spent}",
    )


def run_step(deps: LifecycleDeps, inp: Any) -> StepOutput:
    steps: dict[type[Any], Callable[[LifecycleDeps, Any], StepOutput]] = {
        BeginInput: begin,
        DestroyInput: destroy,
        ProvisionInput: provision,
        FailInput: fail,
        StopBeginInput: stop_begin,
        FinishInput: finish,
    }
    return steps[type(inp)](deps, inp)
