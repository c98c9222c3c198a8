"""The structured event every job transition publishes (pure; the SNS adapter is
`functions/adapters/notify.py`).

    {"type": "tether.job.transition", "job_id": "qlora-7b-3f2a9c1d", "from": "RUNNING",
     "to": "REPLACING", "reason": "replacing generation 1: dead: …", "at": 1767312090.5,
     "generation": 1}

`from` is null for a submission (the job's first state, PENDING); `at` is epoch seconds, as
everywhere on tether's wire. Message attributes `type`, `state` (the new state) and `job_id`
let subscribers filter (an SNS filter policy such as `{"state": ["FAILED", "OVER_BUDGET"]}`).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.job import Job, JobState

JOB_TRANSITION_TYPE: Final = "tether.job.transition"
MAX_REASON_CHARS = 1000  # SNS messages may be 256 KB; a reason is a line, not a log


class JobTransitionEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: Literal["tether.job.transition"] = JOB_TRANSITION_TYPE
    job_id: str
    from_state: JobState | None = Field(alias="from")
    to: JobState
    reason: str
    at: float
    generation: int = Field(ge=0, description="The job's current generation after the move.")

    def message(self) -> str:
        return self.model_dump_json(by_alias=True)

    def attributes(self) -> dict[str, str]:
        return {"type": self.type, "state": self.to.value, "job_id": self.job_id}


def transition_event(
    job: Job, *, reason: str, at: float, from_state: JobState | None = None
) -> JobTransitionEvent:
    """The event for `job` as it is after a transition (its `previous_state` is where it came
    from, unless `from_state` says otherwise)."""
    return JobTransitionEvent(
        job_id=job.job_id,
        from_state=from_state if from_state is not None else job.previous_state,
        to=job.state,
        reason=reason[:MAX_REASON_CHARS],
        at=at,
        generation=job.current_generation,
    )


def submission_event(job: Job, *, reason: str) -> JobTransitionEvent:
    """A new job: from nothing to its first state."""
    return JobTransitionEvent(
        job_id=job.job_id,
        from_state=None,
        to=job.state,
        reason=reason[:MAX_REASON_CHARS],
        at=job.created_at,
        generation=job.current_generation,
    )
