"""Correlated loss of heartbeats (docs/architecture.md#correlated-loss, invariant 9). Pure.

When many jobs go silent together while Vast says their hosts run, the fault is ours or the
network's (an API outage, a flood of junk on the heartbeat route, a DNS or TLS failure between
the hosts and AWS), not the hosts'. Replacing every host would rent a second machine per job,
blame innocent machines and lose the work since each one's last checkpoint, for nothing. So the
monitor holds the `dead` verdicts of the silent jobs (no replace, no blame, no cap used up) and
raises an alarm (`HeartbeatLossHeld`, `infra/constructs/observability.py`).

Nothing bills unwatched meanwhile: a silent agent gets no lease renewal, so each host stops
itself when its lease runs out (invariant 4's bound with the supervisor dead); spend and the
budget rule still run every minute.

The threshold: a loss is correlated when at least `MIN_SILENT_JOBS` (3) jobs are silent *and*
they are at least `MIN_SILENT_FRACTION` (50 %) of the watched ones. Three, because two hosts
dying in the same minutes happens on a cheap marketplace and must still be replaced; half,
because a large fleet loses a few hosts every hour without anything being wrong on our side,
while an outage on our side silences all of them.

- *watched*: a RUNNING job whose current host has heartbeated at least once (past start-up),
  that Vast lists as `running`, or that this run could not list at all (Vast unreadable: it
  does not say the host is gone either);
- *silent*: a watched job whose last heartbeat is at least half its `heartbeat_timeout_s` old
  while training, restoring or uploading (jobs of different policies fall silent together long
  before each reaches its own timeout, so the first to time out is already counted with the
  others).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.health import Health, HeartbeatView, InstanceView
from functions.domain.jobspec import Policy

MIN_SILENT_JOBS = 3
MIN_SILENT_FRACTION = 0.5
SILENT_FRACTION_OF_TIMEOUT = 0.5
_SPEAKING_PHASES = frozenset({"training", "restoring", "uploading"})


class Watch(BaseModel):
    """What the correlated-loss rule needs of one job's decision."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    watched: bool = Field(default=False, description="Vast does not say its host is gone.")
    silent: bool = Field(default=False, description="Watched, and its heartbeats stopped.")


def watch(
    heartbeat: HeartbeatView | None, instance: InstanceView, policy: Policy, now: float
) -> Watch:
    """Whether a RUNNING job's current host counts for the rule, and whether it is silent."""
    if heartbeat is None or heartbeat.phase not in _SPEAKING_PHASES:
        return Watch()
    if instance.listed and not (instance.present and instance.actual_status == "running"):
        return Watch()
    age = now - heartbeat.at
    return Watch(
        watched=True, silent=age >= policy.heartbeat_timeout_s * SILENT_FRACTION_OF_TIMEOUT
    )


def correlated(watches: Sequence[Watch]) -> bool:
    """Enough watched jobs are silent together that the fault is not their hosts'."""
    watched = sum(1 for w in watches if w.watched)
    silent = sum(1 for w in watches if w.silent)
    return silent >= MIN_SILENT_JOBS and silent >= MIN_SILENT_FRACTION * watched


def held(health: Health, cause: Health | None) -> bool:
    """A verdict the rule holds: a dead host (or a job failed for its dead hosts)."""
    return Health.DEAD in (health, cause)
