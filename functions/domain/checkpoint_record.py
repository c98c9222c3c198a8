"""The control plane's record of good checkpoints: the only ones a new generation restores
(docs/architecture.md#recorded-checkpoints, invariant 2). Pure.

Recording rule (`checkpoint_to_record`), applied to an authenticated heartbeat:
- only the job's current generation records: a superseded generation is answered `superseded`
  before anything is stored, and its heartbeats change nothing;
- what it records is its `last_checkpoint` when that checkpoint is its own (same generation),
  carries the manifest's sha256, and sits where the layout puts that step and generation
  (`storage_layout.manifest_key`); a checkpoint restored from an older generation, or one named
  anywhere else, is not recorded;
- a manifest key is recorded once.

The record (`with_recorded`) is a list, newest first in recording order: a later generation's
checkpoint goes before an older one's whatever their steps (the newer generation's line of
training is the current one). It keeps at most `keep_last` checkpoints per generation (the
agent's retention deletes the older ones of its own prefix) and `MAX_RECORDED_CHECKPOINTS` in all.

A new generation gets the list at rent (`restore_candidates`, in its environment) and tries it
in order, trusting a manifest only when its bytes hash to the recorded sha256.
"""

from __future__ import annotations

from collections.abc import Sequence

from functions.domain.heartbeat_contract import (
    MAX_RESTORE_CANDIDATES,
    CheckpointRef,
    HeartbeatRequest,
)
from functions.domain.job import Generation, Heartbeat, Job, TimelineEvent
from functions.domain.jobspec import Checkpoint as CheckpointSettings
from functions.domain.storage_layout import manifest_key

MAX_RECORDED_CHECKPOINTS = 8
MAX_EVENT_MESSAGE = 2000  # characters; the event's data keeps every skip in full
assert MAX_RECORDED_CHECKPOINTS <= MAX_RESTORE_CANDIDATES


def checkpoint_to_record(
    job: Job, generation: Generation, request: HeartbeatRequest
) -> CheckpointRef | None:
    """The checkpoint this heartbeat adds to the record, or None (the module docstring)."""
    current = (
        generation.is_current
        and generation.generation == job.current_generation
        and request.generation == generation.generation
        and request.job_id == job.job_id
    )
    ref = request.last_checkpoint
    if not current or ref is None or ref.manifest_sha256 is None:
        return None
    if ref.generation != request.generation:
        return None
    if ref.manifest_key != manifest_key(job.job_id, ref.step, ref.generation):
        return None
    if any(r.manifest_key == ref.manifest_key for r in job.recorded_checkpoints):
        return None
    return ref


def with_recorded(
    recorded: Sequence[CheckpointRef],
    new: CheckpointRef,
    *,
    keep_per_generation: int,
    limit: int = MAX_RECORDED_CHECKPOINTS,
) -> list[CheckpointRef]:
    """`recorded` with `new` first: one entry per manifest key, at most `keep_per_generation`
    per generation and `limit` in all, newest first."""
    kept: list[CheckpointRef] = []
    per_generation: dict[int, int] = {}
    for ref in (new, *recorded):
        if any(k.manifest_key == ref.manifest_key for k in kept):
            continue
        count = per_generation.get(ref.generation, 0)
        if count >= keep_per_generation:
            continue
        per_generation[ref.generation] = count + 1
        kept.append(ref)
        if len(kept) >= limit:
            break
    return kept


def restore_candidates(job: Job, generation: int) -> list[CheckpointRef]:
    """What generation `generation` may restore, best first: the record, less anything of its
    own generation or newer (which it cannot have written yet)."""
    return [r for r in job.recorded_checkpoints if r.generation < generation][
        :MAX_RECORDED_CHECKPOINTS
    ]


def restore_event(request: HeartbeatRequest, now: float) -> TimelineEvent | None:
    """The timeline event for a restore that skipped a candidate or used none; None for a plain
    restore or a first generation's start with nothing recorded."""
    report = request.restore
    if report is None or (not report.skipped and report.outcome == "restored"):
        return None
    if not report.skipped and report.candidates == 0:
        return None
    restored = request.restored_checkpoint
    if report.outcome == "restored" and restored is not None:
        head = f"restored step {restored.step} (written by g{restored.generation})"
    elif report.outcome == "unreadable":
        head = "storage could not be read: no checkpoint restored, the generation fails"
    else:
        head = f"none of {report.candidates} recorded checkpoint(s) usable: starting from scratch"
    skips = "; ".join(f"{s.manifest_key}: {s.reason}" for s in report.skipped)
    return TimelineEvent(
        job_id=request.job_id,
        at=now,
        kind="restore_skipped" if report.skipped else "restore_fresh",
        message=(f"g{request.generation} {head}" + (f"; skipped {skips}" if skips else ""))[
            :MAX_EVENT_MESSAGE
        ],
        data={
            "generation": request.generation,
            "outcome": report.outcome,
            "skipped": [s.model_dump(mode="json") for s in report.skipped],
        },
    )


def misplaced_event(
    previous: Heartbeat | None,
    request: HeartbeatRequest,
    checkpoint: CheckpointSettings,
    now: float,
) -> TimelineEvent | None:
    """The timeline event for checkpoints the agent found anywhere below the checkpoint dir
    (never uploaded: a Trainer's `output_dir` set to a folder below it, Lightning's
    `lightning_logs/version_0/checkpoints/`), with where each framework saves instead and how
    the save is marked, when a heartbeat names one its generation's previous heartbeat did not;
    None otherwise."""
    if not _names_new(
        previous.misplaced_checkpoints if previous else [], request.misplaced_checkpoints
    ):
        return None
    paths = ", ".join(request.misplaced_checkpoints)
    return TimelineEvent(
        job_id=request.job_id,
        at=now,
        kind="checkpoints_misplaced",
        message=(
            f"g{request.generation} checkpoints below the checkpoint dir are never uploaded: "
            f"{paths}; save each directly in {checkpoint.dir} (Hugging Face: output_dir; "
            "accelerate: save_state into a step_<step> folder there; Lightning: "
            "ModelCheckpoint(dirpath); torch.save: step_<step>.pt there) and mark it with "
            f"the marker file {checkpoint.marker!r} in its folder, or next to a single-file "
            f"checkpoint as <file>.{checkpoint.marker.lstrip('.') or checkpoint.marker} (the "
            "hooks mark Trainer's, accelerate's and Lightning's saves; otherwise "
            "tether_hooks.checkpoint_saved(path); agent/README.md)"
        )[:MAX_EVENT_MESSAGE],
        data={"generation": request.generation, "paths": list(request.misplaced_checkpoints)},
    )


def unmarked_event(
    previous: Heartbeat | None,
    request: HeartbeatRequest,
    checkpoint: CheckpointSettings,
    now: float,
) -> TimelineEvent | None:
    """The timeline event for checkpoints in the checkpoint dir that look complete but carry no
    marker (never uploaded: a script that saves but never marks), with the fix, when a heartbeat
    names one its generation's previous heartbeat did not; None otherwise."""
    if not _names_new(
        previous.unmarked_checkpoints if previous else [], request.unmarked_checkpoints
    ):
        return None
    names = ", ".join(request.unmarked_checkpoints)
    return TimelineEvent(
        job_id=request.job_id,
        at=now,
        kind="checkpoints_unmarked",
        message=(
            f"g{request.generation} checkpoints that look complete are never uploaded, no "
            f"marker file {checkpoint.marker!r} in them: {names}; write it into each checkpoint "
            f"folder under {checkpoint.dir} once saved, or next to a single-file checkpoint as "
            f"<file>.{checkpoint.marker.lstrip('.') or checkpoint.marker} (tether_hooks: the "
            "Hugging Face callback, or checkpoint_saved(path); agent/README.md)"
        )[:MAX_EVENT_MESSAGE],
        data={"generation": request.generation, "names": list(request.unmarked_checkpoints)},
    )


def _names_new(before: Sequence[str], now: Sequence[str]) -> bool:
    """Whether a heartbeat names a path its generation's previous heartbeat did not: only then
    does a report of never-uploaded checkpoints go on the timeline again."""
    return bool(set(now) - set(before))
