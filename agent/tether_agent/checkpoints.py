"""Checkpoint layout and rules, pure (no I/O): keys, manifests, which checkpoint to restore.

Remote layout (DESIGN §3), under the job prefix `jobs/<job_id>/`::

    checkpoints/<step zero-padded to 12>-g<generation>/<files…>
    checkpoints/<step zero-padded to 12>-g<generation>/manifest.json   (written last)

A checkpoint exists only once its manifest exists.

Restore rule, exactly: consider every `checkpoints/<step>-g<gen>/` directory whose generation
`gen` is ≤ the agent's own generation (a directory from a newer generation means this agent is a
zombie; it never reads, trusts or deletes those). Try them in order of step descending, then
generation descending (at equal steps the newer generation wins: it is the one that was current
when it was written, an older generation's copy can only come from a superseded zombie). The
first one whose manifest exists, parses, names the same step and generation as its directory,
and whose every file downloads with the listed size and sha256, is restored. Any failure falls
back to the next candidate; no candidate means a fresh start.

Local layout: the training script saves each checkpoint as a subdirectory of the checkpoint dir
and writes the marker file into it last. The step is the last number in the subdirectory's name
(`checkpoint-500`, `step_000500`, `ckpt500`). Restores land in `checkpoint-<step>`, where Hugging
Face Trainer's `resume_from_checkpoint=True` and `tether_hooks.latest_checkpoint()` look.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_NAME = "manifest.json"
STEP_DIGITS = 12
MIB = 1024 * 1024
MIN_PART = 5 * MIB  # R2 / S3: every part but the last at least 5 MiB
MAX_PART = 5 * 1024 * MIB
MAX_PARTS = 10_000

_REMOTE_DIR = re.compile(rf"^(\d{{{STEP_DIGITS}}})-g(\d+)$")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class ManifestFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    generation: int = Field(ge=1)
    created_at: datetime
    files: list[ManifestFile]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, order=True)
class RemoteCheckpointId:
    """One `checkpoints/<step>-g<generation>/` directory; orders by (step, generation)."""

    step: int
    generation: int

    @property
    def dirname(self) -> str:
        return f"{self.step:0{STEP_DIGITS}d}-g{self.generation}"

    def dir_key(self, prefix: str) -> str:
        return f"{prefix}checkpoints/{self.dirname}/"

    def manifest_key(self, prefix: str) -> str:
        return self.dir_key(prefix) + MANIFEST_NAME


def checkpoints_prefix(prefix: str) -> str:
    return f"{prefix}checkpoints/"


def parse_remote_dir(name: str) -> RemoteCheckpointId | None:
    """`000000000500-g2` (with or without a trailing slash) → (500, 2); anything else → None."""
    match = _REMOTE_DIR.match(name.rstrip("/"))
    if not match:
        return None
    generation = int(match.group(2))
    if generation < 1:
        return None
    return RemoteCheckpointId(int(match.group(1)), generation)


def manifest_problem(manifest: Manifest, cid: RemoteCheckpointId) -> str | None:
    """Why `manifest` cannot stand for the checkpoint in directory `cid`; None when it can.

    The rule every reader of a manifest applies (the restore, and the local stack's judge)."""
    if (manifest.step, manifest.generation) != (cid.step, cid.generation):
        return "manifest names another step or generation"
    bad = [f.path for f in manifest.files if not is_safe_relative(f.path)]
    if bad:
        return f"unsafe path in manifest: {bad[0]}"
    return None


def file_problem(entry: ManifestFile, size: int, sha256: str) -> str | None:
    """Why the bytes read for `entry` (their size and sha256) are not the ones it lists."""
    if size != entry.size:
        return f"{entry.path}: size {size}, manifest says {entry.size}"
    if sha256 != entry.sha256:
        return f"{entry.path}: sha256 mismatch"
    return None


def is_safe_relative(path: str) -> bool:
    """A manifest path that stays inside its checkpoint directory."""
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts and "\\" not in path and bool(path)


def restore_candidates(
    found: list[RemoteCheckpointId], own_generation: int
) -> list[RemoteCheckpointId]:
    """The restore order of the module docstring: newer generations dropped, best first."""
    eligible = {c for c in found if c.generation <= own_generation}
    return sorted(eligible, reverse=True)


def retention_victims(
    found: list[RemoteCheckpointId],
    complete: set[RemoteCheckpointId],
    own_generation: int,
    keep_last: int,
) -> list[RemoteCheckpointId]:
    """Checkpoints to delete so the newest `keep_last` complete ones remain.

    Only directories of this generation or older are touched. Incomplete directories (no
    manifest: killed uploads) older than the oldest kept checkpoint go too; newer incomplete
    ones may still be in flight and stay. Nothing is deleted until `keep_last` complete ones
    exist, so a deletion always has a newer manifest behind it.
    """
    mine = [c for c in found if c.generation <= own_generation]
    kept = sorted((c for c in mine if c in complete), reverse=True)[:keep_last]
    if len(kept) < keep_last:
        return []
    oldest_kept = kept[-1]
    return sorted(c for c in mine if c < oldest_kept)


def local_step(dirname: str) -> int | None:
    """The step of a local checkpoint directory: the last number in its name."""
    match = _LAST_NUMBER.search(dirname)
    return int(match.group(1)) if match else None


def restore_dirname(step: int) -> str:
    return f"checkpoint-{step}"


def part_size_for(size: int, preferred: int = 16 * MIB) -> int:
    """Equal parts within R2's limits: 5 MiB ≤ part ≤ 5 GiB and at most 10,000 parts."""
    if size > MAX_PART * MAX_PARTS:
        raise ValueError(f"file of {size} bytes exceeds the S3 object limit")
    needed = math.ceil(size / MAX_PARTS) if size else 0
    part = max(preferred, needed, MIN_PART)
    part = math.ceil(part / MIB) * MIB  # whole MiB keeps reads page aligned
    return min(part, MAX_PART)
