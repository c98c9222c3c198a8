"""Job records, their states and timeline events, and the decisions taken on them (pure, no I/O).

States (docs/architecture.md#states, fixed):

    PENDING → PROVISIONING → RUNNING ⇄ REPLACING → STOPPING → FINISHED | FAILED | CANCELLED |
    OVER_BUDGET

A job is *active* while its state is not terminal; only active jobs are in the table's
active-jobs index, which the monitor reads every minute.

What a heartbeat does to them (its lease, its records, its reply) is decided in
`functions/domain/heartbeat_decision.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.heartbeat_contract import (
    CheckpointRef,
    GpuProbe,
    OutputsRef,
    Phase,
    RestoreReport,
    ResumeReport,
    StorageCredentials,
)
from functions.domain.jobspec import JobSpec


class JobState(StrEnum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    REPLACING = "REPLACING"
    STOPPING = "STOPPING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    OVER_BUDGET = "OVER_BUDGET"


TERMINAL_STATES = frozenset(
    {JobState.FINISHED, JobState.FAILED, JobState.CANCELLED, JobState.OVER_BUDGET}
)
ACTIVE_STATES = frozenset(JobState) - TERMINAL_STATES

# Every state may go to STOPPING (cancel, over budget) and, from STOPPING, to a terminal state.
# FAILED is also reachable directly, for a provisioning that never got a host.
ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.PROVISIONING, JobState.STOPPING, JobState.FAILED}),
    JobState.PROVISIONING: frozenset({JobState.RUNNING, JobState.STOPPING, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.REPLACING, JobState.STOPPING, JobState.FAILED}),
    JobState.REPLACING: frozenset({JobState.RUNNING, JobState.STOPPING, JobState.FAILED}),
    JobState.STOPPING: TERMINAL_STATES,
    JobState.FINISHED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.OVER_BUDGET: frozenset(),
}

StopReason = Literal["cancelled", "over_budget", "finished", "failed"]
# The terminal state a STOPPING job ends in, by why it was stopped.
TERMINAL_STATE_FOR: dict[str, JobState] = {
    "cancelled": JobState.CANCELLED,
    "over_budget": JobState.OVER_BUDGET,
    "finished": JobState.FINISHED,
    "failed": JobState.FAILED,
}


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_STATES


def can_transition(current: JobState, target: JobState) -> bool:
    return target in ALLOWED_TRANSITIONS[current]


JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,40}-[0-9a-f]{8}$"
_NAME_PART = 40


def new_job_id(name: str) -> str:
    """`<spec name, at most 40 chars>-<8 hex>`: readable in Vast labels and execution names.

    Execution names are capped at 80 characters; `<id>-provision-g<n>-a<k>` stays below.
    """
    return f"{name[:_NAME_PART].rstrip('-')}-{secrets.token_hex(4)}"


# --- lifecycle transitions (state machine input contract, fixed) ----------------------------

TransitionAction = Literal["provision", "replace", "stop"]
MAX_ATTEMPT_NUMBER = 99  # keeps `-a<k>` two digits: names stay within Step Functions' 80


class TransitionRequest(BaseModel):
    """Input of the lifecycle state machine: one attempt of one transition.

    A transition (`action` of `job_id` towards `generation`) is tried as attempts 1, 2, …: the
    monitor starts the next one only when the previous one closed FAILED, TIMED_OUT or ABORTED
    (`functions/domain/attempts.py`, `functions/monitor/repair.py`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: TransitionAction
    job_id: str
    generation: int = Field(ge=0)
    reason: str
    attempt: int = Field(default=1, ge=1, le=MAX_ATTEMPT_NUMBER)

    @property
    def execution_name(self) -> str:
        return execution_name(self.action, self.job_id, self.generation, self.attempt)

    def with_attempt(self, attempt: int) -> TransitionRequest:
        return self.model_copy(update={"attempt": attempt})


def execution_name(action: TransitionAction, job_id: str, generation: int, attempt: int = 1) -> str:
    """`<job>-<action>-g<n>-a<k>` (`<job>-stop-a<k>`): deterministic, so a retried submit or
    overlapping monitor runs collide on the same attempt instead of starting a second one
    (ExecutionAlreadyExists: someone else started it)."""
    if action == "stop":
        return f"{job_id}-stop-a{attempt}"
    return f"{job_id}-{action}-g{generation}-a{attempt}"


# --- records ------------------------------------------------------------------------------


class UnrecordedInstance(BaseModel):
    """A labelled instance of the job that no generation records (a second rent for one
    generation, a rent that lost its race, a stray): it bills all the same until destroyed, so
    the monitor keeps its sightings on the job and counts it in the job's spend."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    instance_id: int
    start: float = Field(description="Vast's start_date, or the first sighting without one.")
    last_seen: float
    usd_per_hour: float = Field(default=0.0, ge=0, description="Vast's dph_total for it.")


class Job(BaseModel):
    """The job item (`pk=JOB#<id> sk=JOB`)."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    name: str
    state: JobState
    spec: JobSpec
    created_at: float
    updated_at: float
    submitted_by: str = ""
    budget_usd: float
    spent_usd: float = 0.0
    current_generation: int = Field(default=0, ge=0, description="0 until the first host.")
    restarts: int = 0
    stop_reason: StopReason | None = None
    state_reason: str = ""
    previous_state: JobState | None = Field(
        default=None, description="The state before the last transition (for job events)."
    )
    # The latest replace the monitor started (detection time, cause, the generation it ended):
    # the heartbeat API measures detection → training resumed from it.
    incident_at: float | None = None
    incident_reason: str = ""
    incident_generation: int | None = None
    # Written by the monitor: instances of this job no generation records, by instance id.
    unrecorded_instances: dict[str, UnrecordedInstance] = Field(default_factory=dict)
    # The checkpoints a new generation may restore, newest first: recorded from heartbeats of
    # the current generation only (functions/domain/checkpoint_record.py). The version makes
    # each write conditional on the list it was computed from.
    recorded_checkpoints: list[CheckpointRef] = Field(default_factory=list)
    recorded_checkpoints_version: int = 0

    @property
    def active(self) -> bool:
        return not is_terminal(self.state)

    @property
    def remaining_budget_usd(self) -> float:
        return max(0.0, self.budget_usd - self.spent_usd)


GenerationStatus = Literal["provisioning", "running", "superseded", "stopped", "failed"]


class Heartbeat(BaseModel):
    """The last heartbeat stored on a generation item."""

    model_config = ConfigDict(extra="ignore")

    at: float
    agent_time: float
    # When API Gateway received it (`requestContext.timeEpoch`): an older heartbeat whose
    # invocation ends after a newer one's is not stored over it (`JobStore.store_heartbeat`).
    received_at: float | None = None
    phase: Phase
    step: int | None = None
    total_steps: int | None = None  # as the script says (`job_status.progress`)
    gpu: GpuProbe
    last_checkpoint: CheckpointRef | None = None
    restored_checkpoint: CheckpointRef | None = None
    restore: RestoreReport | None = None
    misplaced_checkpoints: list[str] = Field(default_factory=list)
    unmarked_checkpoints: list[str] = Field(default_factory=list)
    resumed: ResumeReport | None = None  # agent clock; the generation's `resumed_*` are ours
    outputs: OutputsRef | None = None  # only as recorded (`outputs_record.py`)
    exit_code: int | None = None
    exit_output: str | None = None  # why the generation failed (`functions/domain/crashes.py`)
    bytes_downloaded: int = 0
    bytes_uploaded: int = 0
    last_upload_s: float | None = None  # the last checkpoint upload's seconds


class Generation(BaseModel):
    """One host attempt of a job (`pk=JOB#<id> sk=GEN#<nnnn>`, and its heartbeat item
    `sk=GEN#<nnnn>#HB`: functions/domain/heartbeat_item.py)."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    generation: int = Field(ge=1)
    status: GenerationStatus = "provisioning"
    is_current: bool = True
    token_hash: str = Field(description="sha256 hex of the agent token; the token is never stored")
    instance_id: int | None = None
    offer_id: int | None = None
    machine_id: int | None = None
    usd_per_hour: float = Field(default=0.0, ge=0)
    prices: dict[str, float] = Field(
        default_factory=dict, description="inet_down_usd_per_gb, inet_up_usd_per_gb, …"
    )
    created_at: float = 0.0
    lease_expires_at: float = 0.0
    heartbeat: Heartbeat | None = None
    credentials: StorageCredentials | None = None
    # Written by the lifecycle when the generation is replaced or stopped.
    ended_at: float | None = None
    host_blamed: bool = Field(default=False, description="Replaced as dead or hung.")
    # Written by the monitor each run (functions/domain/reconcile.py).
    spend_usd: float = Field(default=0.0, ge=0)
    job_spent_usd: float = Field(
        default=0.0,
        ge=0,
        description="The job's spend as the monitor run that last supervised this generation "
        "measured it (all its instances): fresher than `Job.spent_usd`, which is refreshed in "
        "steps (`known_spend_usd`).",
    )
    vast_traffic_usd: float = Field(
        default=0.0, ge=0, description="Vast's bwd and bwu charges of the instance, as last read."
    )
    charges_read_at: float | None = Field(
        default=None,
        description="When a monitor run last read Vast's charges: the traffic since is bounded "
        "from above, not known (`functions/domain/spend.py`, `traffic_bound_usd`).",
    )
    traffic_bound_usd: float = Field(
        default=0.0,
        ge=0,
        description="How much the last run's upper bound on the job's spend lies above its "
        "`job_spent_usd` (traffic while Vast's charges were unread; 0 when they were read).",
    )
    progress_step: int | None = None
    progress_at: float | None = Field(default=None, description="When the step last advanced.")
    observed_status: str | None = Field(default=None, description="Vast's actual_status.")
    observed_status_since: float | None = None
    stopped_s: float = Field(
        default=0.0,
        ge=0,
        description="Seconds the instance was seen `stopped` (closed stretches; the open one is "
        "`observed_status_since` → now): billed at the storage rate only.",
    )
    replaced_for: str | None = Field(
        default=None,
        description="The verdict (dead, hung, crashed, overpriced) a replace was started for.",
    )
    move_checked_at: float | None = Field(
        default=None,
        description="When the monitor judged moving this generation to a cheaper host "
        "(functions/domain/move.py): judged once.",
    )
    supervised_at: float | None = Field(
        default=None,
        description="When a monitor run last completed this job's evaluation (read → decide → "
        "apply): the lease and the credentials are renewed only while this is fresh.",
    )
    # Written by the heartbeat API with the generation's first `training` heartbeat: the pace
    # that turns steps into training seconds (functions/domain/measures.py), and where the
    # no-progress clock of the hung rule starts.
    training_started_at: float | None = None
    training_start_step: int | None = None
    gpu_busy_at: float | None = Field(
        default=None,
        description="Heartbeat API: the last heartbeat whose GPU utilisation was above the "
        "job's `gpu_idle_util_pct` (the hung rule judges idleness over its whole window).",
    )
    # Written by the heartbeat API from the agent's `resumed` report, on the server's clock
    # (functions/domain/recovery.py): the step training resumed at on this host, when its
    # process started and when its first step after the restore completed. Recovery ends there.
    resumed_step: int | None = None
    resumed_started_at: float | None = None
    first_step_at: float | None = None
    # Written by the lifecycle at rent: an interruptible (bid) instance and its bid, GPU $/h
    # (`usd_per_hour` and `prices` are at the bid). Stopped when outbid (domain/outbid.py).
    interruptible: bool = False
    bid_usd_per_hour: float | None = Field(default=None, gt=0)
    # Written by the monitor: how often this generation's instance was outbid, and when the
    # stretch last counted began (each stopped stretch counts once, however many runs see it).
    outbids: int = Field(default=0, ge=0)
    outbid_since: float | None = None
    # Written by the lifecycle with the rent: what the pace and start-up measured on this host
    # are filed under, and bounded by (functions/domain/pace.py).
    gpu_name: str | None = None
    gpu_count: int | None = None
    inet_down_mbps: float | None = None
    prior_steps_per_hour: float | None = Field(
        default=None, description="total_steps / the speed prior's hours on this offer."
    )
    dlperf: float | None = None  # the offer's dlperf: where the host sits on the speed prior
    reliability: float | None = Field(
        default=None, ge=0, le=1,
        description="The offer's reliability as the planner priced its interruptions "
        "(`Offer.reliability_score`): a move's judgement prices staying by it.",
    )  # fmt: skip
    heartbeat_item: bool = Field(
        default=False,
        exclude=True,
        description="As read: the generation has a heartbeat item (functions/domain/"
        "heartbeat_item.py), whose fields were merged in; never stored.",
    )


def known_spend_usd(job: Job, generations: Iterable[Generation]) -> float:
    """The job's spend as last measured. The monitor writes it every run with the current
    generation's observation (`Generation.job_spent_usd`: one write per job and run) and onto
    the job item only in steps (`functions/domain/spend.py`, `job_item_spend_due`), so the
    exact figure is the larger of the two; pass every generation read, or the current one."""
    return max([job.spent_usd, *(g.job_spent_usd for g in generations)])


def with_known_spend(job: Job, generations: Iterable[Generation]) -> Job:
    """The job with `spent_usd` as last measured (`known_spend_usd`)."""
    spent = known_spend_usd(job, generations)
    return job if spent == job.spent_usd else job.model_copy(update={"spent_usd": spent})


class HostReputation(BaseModel):
    """`pk=HOST#<machine_id> sk=REP`: how often a machine failed tether jobs (dead or hung),
    and its blame: a weight that halves every `functions.domain.blame.HALF_LIFE_S`, as it was
    at `blame_at` (`functions/domain/blame.py`)."""

    model_config = ConfigDict(frozen=True)

    machine_id: int
    failures: int = 0
    dead_failures: int = 0
    hung_failures: int = 0
    last_failure_at: float = 0.0
    blame: float = Field(default=0.0, ge=0)
    blame_at: float = 0.0


class TimelineEvent(BaseModel):
    """`pk=JOB#<id> sk=EVT#<iso time>#<nnn>#<event id>`: what happened to a job, in order."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    at: float
    seq: int = Field(default=0, ge=0, le=999, description="Orders events of the same instant.")
    event_id: str = Field(
        default_factory=lambda: secrets.token_hex(4),
        description="Keeps two writers of the same instant from overwriting each other.",
    )
    kind: str
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


def new_job(
    spec: JobSpec, *, job_id: str, now: float, submitted_by: str
) -> tuple[Job, TimelineEvent]:
    job = Job(
        job_id=job_id,
        name=spec.name,
        state=JobState.PENDING,
        spec=spec,
        created_at=now,
        updated_at=now,
        submitted_by=submitted_by,
        budget_usd=spec.budget_usd,
    )
    event = TimelineEvent(
        job_id=job_id,
        at=now,
        kind="submitted",
        message=f"submitted by {submitted_by or 'unknown'}; budget ${spec.budget_usd:.2f}",
    )
    return job, event


# --- cancel -------------------------------------------------------------------------------

CancelOutcome = Literal["stop", "already_stopping", "already_ended"]


def cancel_outcome(job: Job) -> CancelOutcome:
    """Cancel is idempotent while the job runs; a job that has ended cannot be cancelled."""
    if is_terminal(job.state):
        return "already_ended"
    if job.state == JobState.STOPPING:
        return "already_stopping"
    return "stop"
