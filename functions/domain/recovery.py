"""Honest recovery figures (pure): where a new host resumed, when it really trained again, and
how much work the fault cost.

Recovery ends at the first training step after the restore, not when the training process
starts: imports and model loading take seconds on a tiny model and minutes on a 7B, and are part
of what a fault costs. The agent reports, in its heartbeats' `resumed` field, the step it
resumed at and when (its clock) the process started and the first step after it completed;
`resumed_on_server` puts those times on the server's clock the way every heartbeat time is read:
the heartbeat's `agent_time` is taken to be `now`, its arrival (so a converted time is late by
the heartbeat's transit at most, which only lengthens a recovery, never shortens it).

Lost work is the last step known before the fault (the dead generation's last heartbeat) minus
the step the next one resumed at. A host that died while training may have gone on past its last
heartbeat, so the figure is a lower bound ("≥ 17 steps lost"); it is exact only when that
heartbeat already said the training had exited.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from functions.domain.heartbeat_contract import HeartbeatRequest
from functions.domain.job import Heartbeat


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def server_time(agent_at: float, *, agent_time: float, now: float) -> float:
    """`agent_at` (the agent's clock) on the server's clock, given that the heartbeat stamped
    `agent_time` arrived at `now`; never later than `now`."""
    return min(now, now - (agent_time - agent_at))


class Resumed(_Frozen):
    """The agent's `resumed` report on the server's clock."""

    step: int
    started_at: float
    first_step_at: float | None

    @property
    def first_step_after_start_s(self) -> float | None:
        """Process start → first step: imports, model build, the first step itself (never
        below 0: two heartbeats' conversions may differ by their transit times)."""
        if self.first_step_at is None:
            return None
        return max(0.0, self.first_step_at - self.started_at)


def resumed_on_server(request: HeartbeatRequest, now: float) -> Resumed | None:
    report = request.resumed
    if report is None:
        return None
    first = report.first_step_at
    return Resumed(
        step=report.step,
        started_at=server_time(report.started_at, agent_time=request.agent_time, now=now),
        first_step_at=(
            None if first is None else server_time(first, agent_time=request.agent_time, now=now)
        ),
    )


class LostWork(_Frozen):
    """Steps a fault threw away; `lower_bound`: the true figure may be larger."""

    steps: int
    lower_bound: bool

    def describe(self) -> str:
        unit = "step" if self.steps == 1 else "steps"
        if self.lower_bound:
            return f"≥ {self.steps} {unit} lost"
        return "no steps lost" if self.steps == 0 else f"{self.steps} {unit} lost"


def lost_work(last_known_step: int | None, resumed_step: int, *, training_ended: bool) -> LostWork:
    """The last step known before the fault minus the step training resumed at (never below 0).
    Unknown (`None`: the dead host never reported a step) counts as nothing known lost, a lower
    bound; exact only when the training had ended by the last report (`training_ended`)."""
    if last_known_step is None:
        return LostWork(steps=0, lower_bound=True)
    return LostWork(steps=max(0, last_known_step - resumed_step), lower_bound=not training_ended)


def last_known_step(heartbeat: Heartbeat | None) -> tuple[int | None, bool]:
    """The dead generation's last reported step and whether its training had exited by then."""
    if heartbeat is None:
        return None, False
    return heartbeat.step, heartbeat.exit_code is not None


def resumed_message(
    generation: int,
    resumed: Resumed,
    *,
    since_incident_s: float | None,
    lost: LostWork | None,
    previous_step: int | None,
) -> str:
    """The timeline line of a generation's first step after its restore."""
    after = resumed.first_step_after_start_s
    where = f"resumed at step {resumed.step}" if resumed.step else "started at step 0"
    text = f"generation {generation} {where}"
    if after is not None:
        text += f"; first step {after:.1f} s after the training process started"
    if since_incident_s is not None:
        text += f", {since_incident_s:.1f} s after the replace began"
    if lost is not None:
        known = "no step" if previous_step is None else f"step {previous_step}"
        text += f"; {lost.describe()} (generation {generation - 1} last reported {known})"
    return text


__all__ = [
    "LostWork",
    "Resumed",
    "last_known_step",
    "lost_work",
    "resumed_message",
    "resumed_on_server",
    "server_time",
]
