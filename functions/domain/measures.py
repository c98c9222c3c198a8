"""What the dashboard and alarms plot, computed from what the monitor and heartbeats know (pure).

The monitor measures the state of all jobs once a run (`BudgetUsedMaxFraction`,
`ActiveInstances`, `HeartbeatAgeMaxS`) and each incident when it starts a replace (`WorkLostS`);
the heartbeat API measures as heartbeats arrive (`RecoveryToTrainingS`, `CheckpointUploadLagS`).

Heartbeats carry steps, not times, so training time is derived from the generation's own pace:
its first `training` heartbeat records when and at which step training began on this host
(`Generation.training_started_at`, `training_start_step`); `n` steps took
`n × (seconds trained / steps trained)` there. That is an average over the generation, exact for
a steady script and never more than the time the generation has trained.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from functions.domain.health import Health
from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.job import Generation, Heartbeat, Job, JobState
from functions.domain.labels import parse_label
from functions.domain.recovery import Resumed
from functions.domain.supervision_facts import InstanceFacts, JobSnapshot

# Metric names (namespace and the one dimension come from functions/observability.py); the
# dashboard (infra/constructs/observability.py) reads the same names.
BUDGET_FRACTION_METRIC = "BudgetUsedMaxFraction"
INSTANCES_METRIC = "ActiveInstances"
HEARTBEAT_AGE_METRIC = "HeartbeatAgeMaxS"
RECOVERY_TIME_METRIC = "RecoveryToTrainingS"
CHECKPOINT_LAG_METRIC = "CheckpointUploadLagS"
WORK_LOST_METRIC = "WorkLostS"

# Counts the alarms and the dashboard read (emitted by functions/monitor/metrics.py,
# functions/lifecycle/metrics.py and functions/api/metrics.py, only when non-zero).
JOBS_METRIC = "JobsSupervised"  # monitor: active jobs this run (sent while there are any)
SPEND_METRIC = "ActiveSpendUsd"  # monitor: spend of all active jobs, USD (idem)
UNSUPERVISED_METRIC = "JobsUnsupervised"  # monitor: evaluations not completed (idem)
SHARD_DIMENSION = "shard"  # JobsUnsupervised of a sharded fleet: one figure per shard
HELD_METRIC = "DeadVerdictsHeld"  # monitor: dead verdicts held (heartbeats lost together)
TRANSITIONS_EXHAUSTED_METRIC = "TransitionsExhausted"  # monitor: a stop past its last attempt
ORPHANS_METRIC = "OrphansDestroyed"  # monitor
MONITOR_ERRORS_METRIC = "MonitorErrors"  # monitor: jobs whose handling raised this run
HOSTS_BLAMED_METRIC = "HostsBlamed"  # monitor: a host judged dead or hung
RECOVERIES_METRIC = "Recoveries"  # monitor: replace-worthy verdicts, every cause together
RECOVERY_CAUSES = ("dead", "hung", "crashed")  # their causes: the monitor run's `verdicts`
# monitor: a healthy job moved to a cheaper host (functions/domain/move.py). A replace too, but
# not a recovery: no metric of its own, counted from the run's `verdicts` like the causes.
MOVE_CAUSE = Health.OVERPRICED.value
JOBS_FAILED_METRIC = "JobsFailed"  # lifecycle: a job failed for good
# lifecycle: a rent Vast refuses (or would refuse) for its arguments, whatever the offer
RENTS_REFUSED_METRIC = "RentsRefused"
JOBS_SUBMITTED_METRIC = "JobsSubmitted"  # jobs API
# monitor: what a person should know of this run, one count read by one alarm (each metric an
# alarm reads is billed, $0.10 a month): orphans destroyed + dead verdicts held + stops past
# their last attempt. Each part keeps its own metric and line on the dashboard.
MONITOR_FINDINGS_METRIC = "MonitorFindings"
# Log lines the dashboard queries with Logs Insights instead of a metric per value (each
# metric name × dimension value is billed as one metric; a log field costs nothing more).
MONITOR_RUN_MESSAGE = "monitor run"  # fields: `verdicts` ({health: count}), …
LIFECYCLE_STEP_MESSAGE = "lifecycle step"  # fields: `outcome`, `state`
LIFECYCLE_OUTCOMES = (
    "rented", "lost_race", "no_capacity", "rent_refused", "destroyed", "failed",
)  # fmt: skip


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- the monitor, once a run ----------------------------------------------------------------


def budget_used_max_fraction(spend_and_budget: Iterable[tuple[float, float]]) -> float | None:
    """The highest spent / budget among active jobs; None without a job to measure."""
    fractions = [spent / budget for spent, budget in spend_and_budget if budget > 0]
    return max(fractions, default=None)


def tether_instances(instances: Iterable[InstanceFacts]) -> int:
    """Labelled instances that exist on Vast: each bills (GPU while running, storage until it is
    destroyed). Instances without a tether label are the user's own and are not counted."""
    return sum(1 for i in instances if parse_label(i.label) is not None)


def heartbeat_age_max_s(snapshots: Iterable[JobSnapshot], now: float) -> float | None:
    """The oldest last heartbeat among running jobs' current generations; None when no running
    generation has heartbeated yet (starting hosts are guarded by the startup timeout)."""
    ages = [
        max(0.0, now - s.current.heartbeat.at)
        for s in snapshots
        if s.job.state == JobState.RUNNING
        and s.current is not None
        and s.current.heartbeat is not None
    ]
    return max(ages, default=None)


# --- training pace --------------------------------------------------------------------------


class TrainingPace(_Frozen):
    """When and at which step training began on one generation's host."""

    started_at: float
    start_step: int

    def seconds_for(self, steps: int, *, step: int, at: float) -> float | None:
        """Training seconds `steps` steps took at this host's average pace from its start to
        (`step`, `at`); None when no pace is measurable yet (no step made, no time passed)."""
        if steps <= 0:
            return 0.0
        elapsed = at - self.started_at
        progressed = step - self.start_step
        if elapsed <= 0 or progressed <= 0:
            return None
        return min(elapsed, steps * elapsed / progressed)


def training_pace(generation: Generation) -> TrainingPace | None:
    if generation.training_started_at is None:
        return None
    return TrainingPace(
        started_at=generation.training_started_at, start_step=generation.training_start_step or 0
    )


def training_start_step(request: HeartbeatRequest) -> int:
    """The step training begins at on a host: the reported one, else the restored checkpoint's."""
    if request.step is not None:
        return request.step
    return request.restored_checkpoint.step if request.restored_checkpoint else 0


def durable_step(heartbeat: Heartbeat) -> int:
    """The step a replacement would resume from: the newest checkpoint in R2 the agent knows
    (uploaded or restored); 0 when there is none."""
    refs = [r.step for r in (heartbeat.last_checkpoint, heartbeat.restored_checkpoint) if r]
    return max(refs, default=0)


# --- the heartbeat API ----------------------------------------------------------------------


def is_first_training_heartbeat(generation: Generation, request: HeartbeatRequest) -> bool:
    return request.phase == "training" and generation.training_started_at is None


def recovery_to_training_s(
    job: Job, generation: Generation, resumed: Resumed | None
) -> float | None:
    """Detection → training resumed: from when the monitor started the replace of generation
    n − 1 to the first training step of generation n after its restore (the agent's report, on
    the server's clock: `functions/domain/recovery.py`), not to its process start. Measured by
    the heartbeat that first reports that step; None for any other."""
    if generation.generation <= 1 or generation.first_step_at is not None:
        return None
    if resumed is None or resumed.first_step_at is None:
        return None
    if job.incident_at is None or job.incident_generation != generation.generation - 1:
        return None
    return max(0.0, resumed.first_step_at - job.incident_at)


def checkpoint_upload_lag_s(
    generation: Generation, request: HeartbeatRequest, now: float
) -> float | None:
    """How far a newly uploaded checkpoint lags behind training, in training seconds.

    Measured once per checkpoint, with the first heartbeat that reports it uploaded by this
    generation: the steps trained past the checkpoint's step by then, at the host's pace. It
    covers marker → manifest plus at most one heartbeat interval (the report's delay).
    """
    checkpoint = request.last_checkpoint
    if checkpoint is None or checkpoint.generation != request.generation or request.step is None:
        return None
    previous = generation.heartbeat.last_checkpoint if generation.heartbeat else None
    if previous is not None and previous.step == checkpoint.step:
        return None  # already measured
    pace = training_pace(generation)
    if pace is None:
        return None
    return pace.seconds_for(max(0, request.step - checkpoint.step), step=request.step, at=now)


# --- the monitor, per incident --------------------------------------------------------------


class WorkLost(_Frozen):
    """Training a replaced generation did past its last durable checkpoint (what the next host
    redoes). Known up to its last heartbeat: a host that died later may have lost a little more."""

    steps: int
    seconds: float | None


def work_lost(generation: Generation) -> WorkLost:
    heartbeat = generation.heartbeat
    pace = training_pace(generation)
    if heartbeat is None or pace is None:
        return WorkLost(steps=0, seconds=0.0)  # it never trained: no training to lose
    step = heartbeat.step if heartbeat.step is not None else pace.start_step
    steps = max(0, step - durable_step(heartbeat))
    return WorkLost(steps=steps, seconds=pace.seconds_for(steps, step=step, at=heartbeat.at))
