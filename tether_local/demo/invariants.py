"""The invariants (docs/architecture.md#invariants) as pure checks over what a demo run left behind
(no I/O).

`tether_local.demo` gathers the evidence — the job, its generations and timeline from DynamoDB,
the checkpoints in the S3 stand-in (each manifest verified file by file), the Vast simulator's
ledger, GPU-billing samples taken while the run went on, the hosts' environments, the answers to
a few bad requests, and the weight hashes of the run and of an uninterrupted reference run — and
`check_invariants` judges it. Every check says why it failed, so a broken run can be read.

Tolerances: times on the local stack are real seconds on a shared machine, so each bound that
the invariants state in monitor intervals gets `slack_s` on top (scheduling jitter of the demo
machine, default 2 s), and never more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.job import Generation, Job
from functions.domain.labels import parse_label
from functions.domain.recovery import lost_work
from functions.domain.storage_layout import job_prefix


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LedgerFacts(_Frozen):
    """One Vast instance's bill (the simulator's ledger)."""

    instance_id: int
    label: str | None
    opened_at: float
    closed_at: float | None
    gpu_usd_per_hour: float
    storage_usd_per_hour: float
    total_usd: float


class BillingSample(_Frozen):
    """At `at`, these instances of the job were billing GPU time."""

    at: float
    instance_ids: tuple[int, ...]


class CheckpointFacts(_Frozen):
    """One `g<gen>/checkpoints/<step>/` directory in the S3 stand-in."""

    prefix: str = Field(description="jobs/<id>/g<gen>/checkpoints/<step>/")
    step: int
    generation: int
    has_manifest: bool
    verified: bool = Field(description="Manifest parses; every file's size and sha256 match.")
    written_at: float | None = Field(default=None, description="The manifest's time.")
    manifest_sha256: str | None = Field(default=None, description="Of the manifest's bytes.")


class Restore(_Frozen):
    """A generation restored this checkpoint (from its heartbeats)."""

    generation: int
    step: int
    manifest_key: str
    manifest_sha256: str | None = None


class Recorded(_Frozen):
    """A checkpoint the control plane recorded, as a generation was given it to restore."""

    step: int
    generation: int
    manifest_key: str
    manifest_sha256: str | None = None


class KeyFacts(_Frozen):
    """The scope of a storage key a host holds, as the Cloudflare simulator minted it."""

    permission: str
    prefixes: tuple[str, ...]
    expires_at: float


class Evidence(_Frozen):
    job: Job
    generations: tuple[Generation, ...]
    ledgers: tuple[LedgerFacts, ...]
    billing_samples: tuple[BillingSample, ...]
    checkpoints: tuple[CheckpointFacts, ...]
    restores: tuple[Restore, ...]
    restore_candidates: Mapping[int, tuple[Recorded, ...]] = Field(
        default_factory=dict,
        description="Generation → the recorded checkpoints it was given (its environment).",
    )
    host_envs: Mapping[int, Mapping[str, str]]
    key_scopes: Mapping[str, KeyFacts] = Field(
        default_factory=dict, description="Access key id → its scope, for keys still live."
    )
    account_secrets: tuple[str, ...]
    bad_input_statuses: Mapping[str, int] = Field(
        description="A bad request of each kind → the HTTP status it got."
    )
    labels_rented: Mapping[str, int] = Field(description="Label → instances ever rented with it.")
    weights_sha256: str | None = Field(description="Weights at the highest verified step.")
    reference_sha256: str | None = Field(description="An uninterrupted run to that step.")
    monitor_interval_s: float
    supervisor_dead_for_s: float = Field(
        default=0, description="How long the monitor was stopped (0: never)."
    )
    ended_at: float
    slack_s: float = 2.0


class Check(_Frozen):
    ok: bool
    detail: str


def _ok(detail: str = "holds") -> Check:
    return Check(ok=True, detail=detail)


def _fail(detail: str) -> Check:
    return Check(ok=False, detail=detail)


def _job_ledgers(e: Evidence) -> list[LedgerFacts]:
    return [
        ledger
        for ledger in e.ledgers
        if (parsed := parse_label(ledger.label)) is not None and parsed[0] == e.job.job_id
    ]


# --- the checks, one per invariant ---------------------------------------------------------


def one_billing_instance(e: Evidence) -> Check:
    """1. At most one billing instance per job at any time, beyond one monitor interval."""
    allowed = e.monitor_interval_s + e.slack_s
    overlap_since: float | None = None
    longest = 0.0
    for sample in sorted(e.billing_samples, key=lambda s: s.at):
        if len(sample.instance_ids) > 1:
            overlap_since = sample.at if overlap_since is None else overlap_since
            longest = max(longest, sample.at - overlap_since)
        else:
            overlap_since = None
    if longest > allowed:
        return _fail(f"two instances billed GPU time together for {longest:.1f} s (> {allowed:g})")
    return _ok(f"longest overlap {longest:.1f} s (allowed {allowed:g} s)")


def no_bad_checkpoint_restored(e: Evidence) -> Check:
    """2. A half-written or corrupt checkpoint is never restored; nor one the control plane did
    not record (a generation restores only what it was given), nor one written by a generation
    after it was replaced (a zombie's late checkpoint)."""
    by_prefix = {c.prefix: c for c in e.checkpoints}
    ended = {g.generation: g.ended_at for g in e.generations}
    for generation, given in e.restore_candidates.items():
        for candidate in given:
            if candidate.generation >= generation:
                return _fail(
                    f"g{generation} was given {candidate.manifest_key} of g{candidate.generation}"
                )
    for restore in e.restores:
        prefix = restore.manifest_key.rsplit("/", 1)[0] + "/"
        given = e.restore_candidates.get(restore.generation, ())
        recorded = next((c for c in given if c.manifest_key == restore.manifest_key), None)
        if recorded is None:
            return _fail(f"g{restore.generation} restored {prefix}, which was never recorded")
        if recorded.manifest_sha256 is None or (
            restore.manifest_sha256 != recorded.manifest_sha256
        ):
            return _fail(
                f"g{restore.generation} restored {prefix} with a manifest sha256 other than "
                "the recorded one"
            )
        found = by_prefix.get(prefix)
        if found is None:
            return _fail(f"g{restore.generation} restored {prefix}, never seen complete")
        if not found.has_manifest:
            return _fail(f"g{restore.generation} restored {prefix}, which has no manifest")
        if not found.verified:
            return _fail(f"g{restore.generation} restored {prefix}, which does not verify")
        if found.manifest_sha256 is not None and found.manifest_sha256 != recorded.manifest_sha256:
            return _fail(f"g{restore.generation} restored {prefix}, whose manifest changed")
        end = ended.get(found.generation)
        if end is not None and found.written_at is not None and found.written_at > end:
            return _fail(
                f"g{restore.generation} restored {prefix}, written after g{found.generation} "
                "was replaced"
            )
    incomplete = sum(1 for c in e.checkpoints if not c.has_manifest or not c.verified)
    return _ok(
        f"{len(e.restores)} restore(s), each of a recorded, verified checkpoint "
        f"({incomplete} incomplete or unverifiable left alone)"
    )


def result_checkpoint(
    checkpoints: Sequence[CheckpointFacts], generations: Sequence[Generation]
) -> CheckpointFacts | None:
    """The job's result as invariant 8 compares it: the highest verified checkpoint written
    while its generation was live (a zombie's late one, however valid, is not the job's)."""
    ended = {g.generation: g.ended_at for g in generations}

    def live_when_written(c: CheckpointFacts) -> bool:
        end = ended.get(c.generation)
        return end is None or c.written_at is None or c.written_at <= end

    ours = [c for c in checkpoints if c.verified and live_when_written(c)]
    return max(ours, key=lambda c: (c.step, c.generation), default=None)


def instances_end_with_generation(e: Evidence) -> Check:
    """3. No labelled instance outlives its job generation by more than two monitor
    intervals (a generation ends when it is replaced, or when the job ends)."""
    allowed = 2 * e.monitor_interval_s + e.slack_s
    generations = {g.generation: g for g in e.generations}
    job_end = e.job.updated_at if not e.job.active else None
    worst = 0.0
    for ledger in _job_ledgers(e):
        parsed = parse_label(ledger.label)
        assert parsed is not None
        generation = generations.get(parsed[1])
        end = generation.ended_at if generation is not None else None
        if end is None:
            end = job_end
        if end is None:
            continue  # the live generation of a job that is still running
        closed = ledger.closed_at if ledger.closed_at is not None else e.ended_at
        late = closed - end
        worst = max(worst, late)
        if late > allowed:
            return _fail(
                f"instance {ledger.instance_id} ({ledger.label}) lived {late:.1f} s past its "
                f"generation (allowed {allowed:g} s)"
            )
    return _ok(f"latest teardown {worst:.1f} s after its generation ended")


def spend_within_budget(e: Evidence) -> Check:
    """4. Spend never passes the budget by more than one monitor interval of the current price;
    with the supervisor dead, by no more than the lease."""
    ledgers = _job_ledgers(e)
    spent = sum(ledger.total_usd for ledger in ledgers)
    price = max(
        (ledger.gpu_usd_per_hour + ledger.storage_usd_per_hour for ledger in ledgers), default=0
    )
    window_s = e.monitor_interval_s + e.slack_s
    if e.supervisor_dead_for_s > 0:
        window_s = max(window_s, e.job.spec.policy.lease_window_s + e.slack_s)
    allowed = e.job.budget_usd + price * window_s / 3600
    if spent > allowed:
        return _fail(
            f"spent ${spent:.6f}, over budget ${e.job.budget_usd:g} + slack (${allowed:.6f})"
        )
    return _ok(f"spent ${spent:.6f} of ${e.job.budget_usd:g}")


def bad_input_refused(e: Evidence) -> Check:
    """5. Every bad input gets a 4xx (here: a sample of bad specs, heartbeats and queries)."""
    if not e.bad_input_statuses:
        return _fail("no bad input was tried")
    wrong = {k: v for k, v in e.bad_input_statuses.items() if not 400 <= v < 500}
    if wrong:
        return _fail(f"not a 4xx: {wrong}")
    return _ok(f"{len(e.bad_input_statuses)} bad requests, each a 4xx")


def hosts_hold_job_scoped_credentials(e: Evidence) -> Check:
    """6. A rented host holds only job-scoped, expiring credentials: a read-only key on the
    job's prefix and a read-write key on its own generation's prefix, both expiring."""
    prefix = job_prefix(e.job.job_id)
    for instance_id, env in e.host_envs.items():
        for secret in e.account_secrets:
            if len(secret) >= 8 and any(secret in v or secret in k for k, v in env.items()):
                return _fail(f"host {instance_id} holds an account-wide secret")
        if env.get("TETHER_S3_PREFIX") != prefix:
            return _fail(f"host {instance_id}: storage prefix {env.get('TETHER_S3_PREFIX')!r}")
        for expiry in ("TETHER_S3_CREDENTIALS_EXPIRE_AT", "TETHER_S3_WRITE_CREDENTIALS_EXPIRE_AT"):
            if not env.get(expiry):
                return _fail(f"host {instance_id}: storage credentials without {expiry}")
        own = f"{prefix}g{env.get('TETHER_GENERATION', '?')}/"
        for name, permission, scope in (
            ("TETHER_S3_ACCESS_KEY_ID", "object-read-only", (prefix,)),
            ("TETHER_S3_WRITE_ACCESS_KEY_ID", "object-read-write", (own,)),
        ):
            found = e.key_scopes.get(env.get(name, ""))
            if found is not None and (found.permission, found.prefixes) != (permission, scope):
                return _fail(
                    f"host {instance_id}: {name} is {found.permission} on {found.prefixes}, "
                    f"not {permission} on {scope}"
                )
    return _ok(
        f"{len(e.host_envs)} host(s), each a read-only key on the job and a read-write key on "
        "its own generation, expiring"
    )


def rented_once_per_generation(e: Evidence) -> Check:
    """7. Transitions are idempotent: each generation was rented once."""
    twice = {label: n for label, n in e.labels_rented.items() if n > 1}
    if twice:
        return _fail(f"rented more than once: {twice}")
    recorded = [g.instance_id for g in e.generations if g.instance_id is not None]
    if len(recorded) != len(set(recorded)):
        return _fail("two generations recorded the same instance")
    return _ok(f"{len(e.labels_rented)} generation(s), one rent each")


def identical_to_uninterrupted(e: Evidence) -> Check:
    """8. The run ends with the same weights as one that was never interrupted."""
    if e.weights_sha256 is None or e.reference_sha256 is None:
        return _fail("no verified checkpoint to compare")
    if e.weights_sha256 != e.reference_sha256:
        return _fail(f"weights {e.weights_sha256[:12]}… ≠ reference {e.reference_sha256[:12]}…")
    return _ok(f"identical (sha256 {e.weights_sha256[:12]}…)")


INVARIANTS: dict[str, Callable[[Evidence], Check]] = {
    "1_one_billing_instance": one_billing_instance,
    "2_no_bad_checkpoint_restored": no_bad_checkpoint_restored,
    "3_instances_end_with_generation": instances_end_with_generation,
    "4_spend_within_budget": spend_within_budget,
    "5_bad_input_refused": bad_input_refused,
    "6_job_scoped_credentials": hosts_hold_job_scoped_credentials,
    "7_rented_once_per_generation": rented_once_per_generation,
    "8_identical_to_uninterrupted": identical_to_uninterrupted,
}


def check_invariants(evidence: Evidence) -> dict[str, Check]:
    return {name: check(evidence) for name, check in INVARIANTS.items()}


# --- incidents ------------------------------------------------------------------------------


class Fault(_Frozen):
    """What the demo did to the job, and when."""

    kind: str
    at: float
    generation: int
    step_at_fault: int = Field(description="The step the job had reached (last heartbeat).")
    detected_at: float | None = Field(
        default=None, description="When it was noticed, where not by a monitor verdict."
    )


class GenerationProgress(_Frozen):
    """What the demo saw of one generation while polling."""

    generation: int
    first_training_at: float | None = Field(
        default=None, description="When the demo first saw it `training` (its process started)."
    )
    restored_step: int | None = None
    first_step_after_start_s: float | None = Field(
        default=None,
        description="Its process start → its first step after the restore, as the agent reported.",
    )
    first_step_at: float | None = Field(
        default=None, description="Its first training step after the restore (stored by the API)."
    )


class Incident(_Frozen):
    kind: str
    detected_after_s: float | None
    resumed_after_s: float | None = Field(
        description="Fault → the next generation's first training step after its restore."
    )
    first_step_after_start_s: float | None = Field(
        default=None,
        description="Of `resumed_after_s`: the next generation's process start → first step.",
    )
    lost_steps: int | None
    lost_steps_lower_bound: bool = Field(
        default=True,
        description="The step at the fault was read just before it: the host may have gone on.",
    )


def incidents(
    faults: Sequence[Fault],
    verdicts: Sequence[tuple[float, str]],
    progress: Mapping[int, GenerationProgress],
) -> list[Incident]:
    """Per fault: how long until the monitor's verdict, until the next generation's first
    training step after its restore (not its process start), and how many steps the job went
    back (the step reached minus the step restored: a lower bound, `functions.domain.recovery`)."""
    found = []
    for fault in faults:
        detected = fault.detected_at
        if detected is None:
            detected = next((at for at, _ in sorted(verdicts) if at >= fault.at), None)
        after = progress.get(fault.generation + 1)
        resumed = after.first_step_at if after is not None else None
        lost = None
        if after is not None and resumed is not None:
            lost = lost_work(fault.step_at_fault, after.restored_step or 0, training_ended=False)
        start_to_step = after.first_step_after_start_s if after is not None else None
        found.append(
            Incident(
                kind=fault.kind,
                detected_after_s=None if detected is None else round(detected - fault.at, 2),
                resumed_after_s=None if resumed is None else round(resumed - fault.at, 2),
                first_step_after_start_s=None if start_to_step is None else round(start_to_step, 2),
                lost_steps=None if lost is None else lost.steps,
                lost_steps_lower_bound=True if lost is None else lost.lower_bound,
            )
        )
    return found


__all__ = [
    "INVARIANTS",
    "BillingSample",
    "Check",
    "CheckpointFacts",
    "Evidence",
    "Fault",
    "GenerationProgress",
    "Incident",
    "KeyFacts",
    "LedgerFacts",
    "Recorded",
    "Restore",
    "check_invariants",
    "incidents",
    "result_checkpoint",
]
