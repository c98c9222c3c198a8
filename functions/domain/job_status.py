"""What `tether status` answers, from the job's records alone (pure): the last transition in
words, the host's real state, step N of M, the pace, the time to finish and what the job is
expected to cost in all, and the last error.

- **The reason of a state** (`current_reason`) is shown only while it is the state of affairs:
  the replace's `dead: …` stays on the job item after the replacement host is recorded (the
  rent does not rewrite it), but once the job is RUNNING again it is history, said as "recovered
  from a dead host" (`last_transition`).
- **The host's state** (`host_state`) is the generation's, not its record's `status` (which the
  rent writes as `provisioning` and nothing moves on): none reported yet, the agent's phase from
  its last heartbeat, `lost` once that heartbeat is older than the job's `heartbeat_timeout_s`
  (what the monitor calls dead), `replaced` once superseded, `ended` once destroyed.
- **Step N of M**: N from the current host's last heartbeat (else the newest recorded
  checkpoint), M from the spec's `total_steps`, else from the script (`total_steps` in the
  heartbeat: the progress file's, or the Trainer's `max_steps`).
- **Pace** in steps per minute, with a band (`Pace.low`, `Pace.high`): measured on this host from
  its first step after the restore (else its first `training` heartbeat) to its last heartbeat,
  ±`SETTLED_SPREAD` once it spans `pace.MIN_SAMPLE_S` and `pace.MIN_SAMPLE_STEPS`,
  ±`EARLY_SPREAD` before; else an earlier generation's on the same GPU model and count
  (±`EARLIER_HOST_SPREAD`); else the speed prior's pace on this offer, ×/÷ `PRIOR_FACTOR`.
- **Time and cost to finish**: the steps left at that pace (band: the fast and slow ends), at
  the host's $/h; the expected total is the spend so far plus that. Training time only: a
  replacement's start-up and the traffic are not in it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from functions.domain.crashes import last_failure, last_output_line
from functions.domain.health import Health
from functions.domain.job import Generation, Job, JobState
from functions.domain.pace import MIN_SAMPLE_S, MIN_SAMPLE_STEPS, gpu_key
from functions.domain.reasons import reason_health

SETTLED_SPREAD = 0.1  # a pace measured over five minutes and ten steps: ±10 %
EARLY_SPREAD = 0.5  # a pace measured over less: ±50 %
EARLIER_HOST_SPREAD = 0.25  # the pace an earlier host of the same GPU model and count had
PRIOR_FACTOR = 2.0  # the speed prior's pace, from half to twice it

# States whose reason is the state of affairs (why it is replacing, stopping, or ended).
REASON_STATES = frozenset(
    {
        JobState.REPLACING,
        JobState.STOPPING,
        JobState.FINISHED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.OVER_BUDGET,
    }
)

# A replacement's cause, as "recovered from …" says it.
CAUSE_WORDS: dict[Health, str] = {
    Health.DEAD: "a dead host",
    Health.HUNG: "a hung host",
    Health.CRASHED: "a training crash",
    Health.OUTBID: "an outbid host",
}

HostState = Literal[
    "none",
    "provisioning",
    "starting",
    "restoring",
    "training",
    "uploading",
    "stopping",
    "finished",
    "failed",
    "lost",
    "replaced",
    "ended",
]
PaceSource = Literal["this host", "an earlier host", "prior"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Transition(_Frozen):
    text: str
    at: float


class HostStatus(_Frozen):
    state: HostState
    since: float | None = None  # lost: the last heartbeat; provisioning: the rent


class Pace(_Frozen):
    steps_per_min: float
    low: float
    high: float
    source: PaceSource


class Progress(_Frozen):
    step: int | None = None
    total_steps: int | None = None
    total_steps_from: Literal["spec", "script"] | None = None
    pace: Pace | None = None
    eta_s: float | None = None
    eta_low_s: float | None = None  # at the fast end of the pace's band
    eta_high_s: float | None = None  # at the slow end
    usd_per_hour: float | None = None
    to_finish_usd: float | None = None
    expected_total_usd: float | None = None
    expected_total_low_usd: float | None = None
    expected_total_high_usd: float | None = None


class LastError(_Frozen):
    generation: int
    text: str


# --- state and transition ---------------------------------------------------------------------


def current_reason(job: Job) -> str | None:
    """The state's reason while it is the state of affairs; None once the job has left the
    state that reason was given for (a RUNNING job recovered from `dead: …`)."""
    if job.state not in REASON_STATES:
        return None
    return job.state_reason or None


def cause_words(reason: str) -> str:
    """`dead: no heartbeat for 400 s` → "a dead host"; an unknown head is said as it is."""
    health = reason_health(reason)
    if health in CAUSE_WORDS:
        return CAUSE_WORDS[health]
    head = reason.split(":", 1)[0].strip()
    return head or "a replacement"


def last_transition(job: Job, current: Generation | None) -> Transition:
    """The job's last transition in words, and when (the job item's `updated_at`, or the
    replacement host's first step for a recovery)."""
    state = job.state
    if state == JobState.PENDING:
        return Transition(text="submitted, waiting for a host to be looked for", at=job.created_at)
    if state == JobState.PROVISIONING:
        return Transition(text="looking for a host", at=job.updated_at)
    if state == JobState.RUNNING:
        if job.previous_state == JobState.REPLACING and job.state_reason:
            cause = cause_words(job.state_reason)
            if current is not None and current.first_step_at is not None:
                return Transition(text=f"recovered from {cause}", at=current.first_step_at)
            return Transition(
                text=f"recovering from {cause}: a new host is rented, training not resumed yet",
                at=job.updated_at,
            )
        return Transition(text="rented its host", at=job.updated_at)
    if state == JobState.REPLACING:
        return Transition(text="replacing its host", at=job.updated_at)
    if state == JobState.STOPPING:
        return Transition(text="stopping", at=job.updated_at)
    return Transition(text=f"ended {state.value}", at=job.updated_at)


def host_state(generation: Generation | None, heartbeat_timeout_s: float, now: float) -> HostStatus:
    """What the generation's host is doing (module docstring)."""
    if generation is None:
        return HostStatus(state="none")
    if generation.ended_at is not None:
        return HostStatus(state="ended", since=generation.ended_at)
    if not generation.is_current:
        return HostStatus(state="replaced")
    beat = generation.heartbeat
    if beat is None:
        return HostStatus(state="provisioning", since=generation.created_at or None)
    if now - beat.at > heartbeat_timeout_s and beat.phase not in ("finished", "failed"):
        return HostStatus(state="lost", since=beat.at)
    return HostStatus(state=beat.phase)


# --- progress ---------------------------------------------------------------------------------


def measured_pace(generation: Generation) -> tuple[float, float] | None:
    """(steps, seconds) the generation trained, from its first step after the restore (else
    its first `training` heartbeat) to its last heartbeat with a step; None before it stepped."""
    beat = generation.heartbeat
    if generation.first_step_at is not None and generation.resumed_step is not None:
        start = (generation.resumed_step, generation.first_step_at)
    elif generation.training_started_at is not None:
        start = (generation.training_start_step or 0, generation.training_started_at)
    else:
        return None
    if beat is not None and beat.step is not None:
        end = (beat.step, beat.at)
    elif generation.progress_step is not None and generation.progress_at is not None:
        end = (generation.progress_step, generation.progress_at)
    else:
        return None
    steps, seconds = float(end[0] - start[0]), end[1] - start[1]
    if steps <= 0 or seconds <= 0:
        return None
    return steps, seconds


def _band(steps_per_min: float, spread: float, source: PaceSource) -> Pace:
    return Pace(
        steps_per_min=steps_per_min,
        low=steps_per_min * (1 - spread),
        high=steps_per_min * (1 + spread),
        source=source,
    )


def pace_of(current: Generation, generations: Iterable[Generation]) -> Pace | None:
    """The pace the steps left are timed at (module docstring), None when nothing says."""
    measured = measured_pace(current)
    if measured is not None:
        steps, seconds = measured
        settled = seconds >= MIN_SAMPLE_S and steps >= MIN_SAMPLE_STEPS
        return _band(steps / seconds * 60, SETTLED_SPREAD if settled else EARLY_SPREAD, "this host")
    if current.gpu_name is not None:
        earlier = sorted(
            (
                g
                for g in generations
                if g.generation < current.generation
                and g.gpu_name is not None
                and gpu_key(g.gpu_name) == gpu_key(current.gpu_name)
                and g.gpu_count == current.gpu_count
            ),
            key=lambda g: g.generation,
            reverse=True,
        )
        for g in earlier:
            found = measured_pace(g)
            if found is not None:
                return _band(found[0] / found[1] * 60, EARLIER_HOST_SPREAD, "an earlier host")
    prior = current.prior_steps_per_hour
    if prior is not None and prior > 0:
        per_min = prior / 60
        return Pace(
            steps_per_min=per_min,
            low=per_min / PRIOR_FACTOR,
            high=per_min * PRIOR_FACTOR,
            source="prior",
        )
    return None


def progress(job: Job, current: Generation | None, generations: Iterable[Generation]) -> Progress:
    """Step N of M, the pace, the time left and the expected total (module docstring).
    `job.spent_usd` is the spend so far (as last measured: `with_known_spend`)."""
    generations = list(generations)
    beat = current.heartbeat if current is not None else None
    recorded = max((c.step for c in job.recorded_checkpoints), default=None)
    step = beat.step if beat is not None and beat.step is not None else recorded
    total = job.spec.total_steps
    total_from: Literal["spec", "script"] = "spec"
    if total is None and beat is not None and beat.total_steps is not None:
        total, total_from = beat.total_steps, "script"
    found = Progress(
        step=step,
        total_steps=total,
        total_steps_from=total_from if total is not None else None,
    )
    if current is None or total is None or job.state not in (JobState.RUNNING, JobState.REPLACING):
        return found
    pace = pace_of(current, generations)
    if pace is None:
        return found
    left = max(0, total - (step or 0))
    eta_s = left / pace.steps_per_min * 60
    eta_low_s = left / pace.high * 60
    eta_high_s = left / pace.low * 60
    rate = current.usd_per_hour
    return found.model_copy(
        update={
            "pace": pace,
            "eta_s": eta_s,
            "eta_low_s": eta_low_s,
            "eta_high_s": eta_high_s,
            "usd_per_hour": rate,
            "to_finish_usd": eta_s / 3600 * rate,
            "expected_total_usd": job.spent_usd + eta_s / 3600 * rate,
            "expected_total_low_usd": job.spent_usd + eta_low_s / 3600 * rate,
            "expected_total_high_usd": job.spent_usd + eta_high_s / 3600 * rate,
        }
    )


# --- the last error ---------------------------------------------------------------------------


def last_error(job: Job, generations: Iterable[Generation]) -> LastError | None:
    """The newest generation's failure in one line: its training's exit code and last output
    line (`crashes.last_failure`), or why its host was replaced (`incident_reason`, the
    monitor's verdict); the training's own words win for the same generation."""
    failure = last_failure(generations)
    said: LastError | None = None
    if failure is not None:
        code = failure["exit_code"]
        head = (
            f"training exited with code {code}" if code is not None else "training could not start"
        )
        line = last_output_line(failure["output"])
        text = head + (f": {line}" if line else "")
        said = LastError(generation=failure["generation"], text=text)
    incident = job.incident_generation
    newer = incident is not None and (said is None or said.generation < incident)
    if job.incident_reason and incident is not None and newer:
        return LastError(generation=incident, text=f"host replaced as {job.incident_reason}")
    return said
