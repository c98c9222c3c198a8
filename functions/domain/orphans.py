"""Orphans (docs/architecture.md#orphans, invariant 3): labelled instances that belong to no live
generation. Pure.

The monitor destroys them. An instance is left alone while younger than the grace (a rent lands
in Vast's list before the lifecycle records it); one listed without a start date is as old as
its first sighting, which the monitor keeps (`first_seen`), so it is swept all the same.

The instances of a job that has been STOPPING for longer than the grace, and the old instance of
a job that has been REPLACING it for as long, are swept too (`doomed_instance_reason`): their
transition destroys them first, so this only acts while that transition's attempts keep failing
(`functions/domain/attempts.py`), and money stops all the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from functions.domain.attempts import doomed_instance_reason
from functions.domain.job import JobState
from functions.domain.labels import parse_label
from functions.domain.supervision_facts import (
    InstanceFacts,
    JobSnapshot,
    SupervisionSettings,
    instance_start,
)

# States in which the lifecycle may be renting the next generation right now.
RENTING_STATES = frozenset({JobState.PENDING, JobState.PROVISIONING, JobState.REPLACING})


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Orphan(_Frozen):
    instance_id: int
    label: str
    reason: str


def labelled_by_job(instances: Iterable[InstanceFacts]) -> dict[str, list[InstanceFacts]]:
    """The listed instances whose label is a tether label, by job id."""
    found: dict[str, list[InstanceFacts]] = {}
    for instance in instances:
        parsed = parse_label(instance.label)
        if parsed is not None:
            found.setdefault(parsed[0], []).append(instance)
    return found


def unseen_starts(
    instances: Iterable[InstanceFacts], first_seen: Mapping[int, float]
) -> tuple[int, ...]:
    """Labelled instances without a start date whose first sighting is not kept yet."""
    return tuple(
        i.id
        for i in instances
        if i.start_date is None and parse_label(i.label) is not None and i.id not in first_seen
    )


def find_orphans(
    snapshots: Sequence[JobSnapshot],
    instances: Iterable[InstanceFacts],
    *,
    now: float,
    settings: SupervisionSettings,
    first_seen: Mapping[int, float] | None = None,
) -> list[Orphan]:
    """Labelled instances that belong to no live generation (docs/architecture.md#orphans).

    Live: the instance recorded for an active job's current generation, and the next
    generation's instance while the lifecycle is renting it (not recorded yet); but no
    instance of a job that has been STOPPING, nor of the generation a REPLACING job replaces,
    for longer than the grace. Instances younger than the grace are left for the next run: a
    rent lands in Vast's list before the lifecycle records it. An instance without a start
    date is as old as its first sighting.
    """
    by_job = {s.job.job_id: s for s in snapshots}
    seen = first_seen or {}
    orphans = []
    for instance in instances:
        parsed = parse_label(instance.label)
        if parsed is None:
            continue  # not a tether instance: never touched
        job_id, generation = parsed
        snapshot = by_job.get(job_id)
        reason = _orphan_reason(snapshot, instance, generation)
        if reason is None and snapshot is not None:
            # Its stop or replace should have destroyed it by now: money stops even while that
            # transition's executions keep failing (they are retried as new attempts).
            reason = doomed_instance_reason(
                snapshot.job, generation, now=now, grace_s=settings.orphan_grace_s
            )
        if reason is None:
            continue
        age = now - instance_start(instance, seen, now)
        if age < settings.orphan_grace_s:
            continue
        orphans.append(Orphan(instance_id=instance.id, label=instance.label or "", reason=reason))
    return orphans


def _orphan_reason(
    snapshot: JobSnapshot | None, instance: InstanceFacts, generation: int
) -> str | None:
    if snapshot is None:
        return "its job has ended or does not exist"
    job = snapshot.job
    current = job.current_generation
    if generation == current:
        recorded = snapshot.current.instance_id if snapshot.current else None
        if recorded is not None and recorded != instance.id:
            return f"a second instance for generation {generation} (recorded: {recorded})"
        return None
    if generation == current + 1 and job.state in RENTING_STATES:
        return None
    if generation < current:
        return f"generation {generation} was replaced by {current}"
    return f"generation {generation} is not being provisioned (job {job.state.value})"
