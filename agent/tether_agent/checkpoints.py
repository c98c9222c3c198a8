"""Checkpoint layout and rules, pure (no I/O): keys, manifests, which checkpoints to restore.

Remote layout (docs/architecture.md#bucket-layout), under the job prefix `jobs/<job_id>/`::

    g<generation>/checkpoints/<step zero-padded to 12>/<files…>
    g<generation>/checkpoints/<step zero-padded to 12>/manifest.json   (written last)
    g<generation>/outputs/files/<files…>
    g<generation>/outputs/manifest.json                                 (written last)

A generation writes only under its own `g<generation>/` (its read-write key reaches nothing
else) and reads the job's prefix (a read-only key). A checkpoint exists only once its manifest
exists.

Restore rule, exactly: the agent does not look for checkpoints; it restores only the ones the
control plane recorded from heartbeats of the then-current generation, which it is given at
start (newest first, `TETHER_RESTORE_CHECKPOINTS`), and tries them in that order. A candidate
is skipped, with the reason reported in a heartbeat, when anything about it is wrong: it carries
no recorded sha256, it is of this generation or a newer one, its manifest key is not where the
layout puts its step and generation (`candidate_problem`); the manifest is missing, larger than
`MAX_MANIFEST_BYTES`, its bytes do not hash to the recorded sha256, it does not parse, it names
another step or generation, a path outside its directory, a duplicate, or too many files
(`manifest_problem`); a listed file is missing or has another size in the bucket, the files do
not fit on the disk, or a download does not match its size and sha256. Any exception at all on a
candidate is a skip; no usable candidate means a fresh start.

Retention: a generation deletes only its own checkpoints (`retention_victims`), the older ones
beyond `keep_last`; older generations' checkpoints are out of its reach and stay.

Local layout: the training script saves each checkpoint in the checkpoint dir, either as a
subdirectory with the marker file written into it last, or as a single file with a sibling
marker `<file name>.<marker without its leading dot>` written next to it last
(`epoch=0-step=50.ckpt` and `epoch=0-step=50.ckpt.tether-complete`: `sibling_marker_name`). The
step is the last number in the directory's name or the file's name without its suffix
(`checkpoint-500`, `step_000500`, `epoch=0-step=50.ckpt`), except that a `step=<n>` in the name
wins (Lightning's `{step}`, followed by a metric or a `-v1` version: `local_step`); a name
without a number (Lightning's `last.ckpt`) is no checkpoint. The manifest records the name as
saved (`name`, and `kind` for a file), and the restore writes the checkpoint back under it, so a
script that parses its own folder name finds it; a manifest without a name (written before names
were recorded) restores as a directory `checkpoint-<step>`. A recorded name is trusted only when
it is one plain path component that carries the manifest's step (`name_problem`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tether_agent.protocol import CheckpointRef

MANIFEST_NAME = "manifest.json"
DEFAULT_MARKER = ".tether-complete"  # the job's `checkpoint.marker` when it sets none
STEP_DIGITS = 12
MIB = 1024 * 1024
MIN_PART = 5 * MIB  # R2 / S3: every part but the last at least 5 MiB
MAX_PART = 5 * 1024 * MIB
MAX_PARTS = 10_000

MAX_MANIFEST_BYTES = 16 * MIB  # a manifest of 100,000 files is about 15 MiB
MAX_MANIFEST_FILES = 100_000
MAX_NAME_BYTES = 255  # one path component on Linux

_STEP_DIR = re.compile(rf"^(\d{{{STEP_DIGITS}}})$")
_MANIFEST_KEY = re.compile(rf"^g([1-9]\d{{0,8}})/checkpoints/(\d{{{STEP_DIGITS}}})/manifest\.json$")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")
_STEP_KEY = re.compile(r"(?<![A-Za-z0-9_])step=(\d+)")  # Lightning's `{step}` in a file name


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
    # The checkpoint's local name as saved; None in manifests written before it was recorded.
    name: str | None = Field(default=None, min_length=1, max_length=4 * MAX_NAME_BYTES)
    # "file": one file, listed as `name`, restored as it; "directory": its files below `name`.
    kind: Literal["directory", "file"] = "directory"

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def generation_prefix(prefix: str, generation: int) -> str:
    """`jobs/<job_id>/g<generation>/`: all a generation may write."""
    return f"{prefix}g{generation}/"


def checkpoints_prefix(prefix: str, generation: int) -> str:
    return f"{generation_prefix(prefix, generation)}checkpoints/"


@dataclass(frozen=True, order=True)
class RemoteCheckpointId:
    """One `g<generation>/checkpoints/<step>/` directory; orders by (step, generation)."""

    step: int
    generation: int

    @property
    def dirname(self) -> str:
        return f"{self.step:0{STEP_DIGITS}d}"

    def dir_key(self, prefix: str) -> str:
        return f"{checkpoints_prefix(prefix, self.generation)}{self.dirname}/"

    def manifest_key(self, prefix: str) -> str:
        return self.dir_key(prefix) + MANIFEST_NAME


def outputs_prefix(prefix: str, generation: int) -> str:
    """`g<generation>/outputs/`: the job's result (the outputs dir), `files/` and a manifest."""
    return f"{generation_prefix(prefix, generation)}outputs/"


def output_files_prefix(prefix: str, generation: int) -> str:
    return f"{outputs_prefix(prefix, generation)}files/"


def outputs_manifest_key(prefix: str, generation: int) -> str:
    """Written last: the outputs exist only once it does."""
    return outputs_prefix(prefix, generation) + MANIFEST_NAME


def parse_remote_dir(name: str) -> int | None:
    """The step of a directory under a generation's `checkpoints/` (`000000000500`, with or
    without a trailing slash); anything else → None."""
    match = _STEP_DIR.match(name.rstrip("/"))
    return int(match.group(1)) if match else None


def parse_manifest_key(prefix: str, key: str) -> RemoteCheckpointId | None:
    """The checkpoint whose manifest `key` is, under the job prefix `prefix`; else None."""
    if not key.startswith(prefix):
        return None
    match = _MANIFEST_KEY.match(key[len(prefix) :])
    return RemoteCheckpointId(int(match.group(2)), int(match.group(1))) if match else None


def candidate_problem(
    ref: CheckpointRef, prefix: str, own_generation: int
) -> tuple[RemoteCheckpointId | None, str | None]:
    """The checkpoint a recorded candidate stands for, or why it cannot be tried at all."""
    if ref.manifest_sha256 is None:
        return None, "no recorded manifest sha256"
    if ref.generation >= own_generation:
        return None, f"written by g{ref.generation}, not an earlier generation"
    cid = parse_manifest_key(prefix, ref.manifest_key)
    if cid is None:
        return None, "manifest key is not in the job's checkpoint layout"
    if (cid.step, cid.generation) != (ref.step, ref.generation):
        return None, "manifest key names another step or generation"
    return cid, None


def manifest_problem(manifest: Manifest, cid: RemoteCheckpointId) -> str | None:
    """Why `manifest` cannot stand for the checkpoint in directory `cid`; None when it can.

    The rule every reader of a manifest applies (the restore, and the local stack's judge)."""
    if (manifest.step, manifest.generation) != (cid.step, cid.generation):
        return "manifest names another step or generation"
    if len(manifest.files) > MAX_MANIFEST_FILES:
        return f"manifest lists {len(manifest.files)} files (at most {MAX_MANIFEST_FILES})"
    bad = [f.path for f in manifest.files if not is_safe_relative(f.path)]
    if bad:
        return f"unsafe path in manifest: {bad[0][:100]}"
    paths = [PurePosixPath(f.path).as_posix() for f in manifest.files]
    if len(set(paths)) != len(paths):
        return "manifest lists a file twice"
    if MANIFEST_NAME in paths:
        return f"manifest lists a file named {MANIFEST_NAME}"
    if manifest.name is not None and (problem := name_problem(manifest.name, manifest.step)):
        return problem
    if manifest.kind == "file":
        if manifest.name is None:
            return "a file checkpoint's manifest names no file"
        if paths != [manifest.name]:
            return "a file checkpoint's manifest must list exactly its one file"
    return None


def name_problem(name: str, step: int) -> str | None:
    """Why a recorded checkpoint name cannot be written back into the checkpoint dir: it must be
    one path component, not hidden, without control characters, and carry `step`."""
    shown = ascii(name)[:100]
    if "/" in name or "\\" in name or name in (".", ".."):
        return f"checkpoint name {shown} is not one path component"
    if name.startswith("."):
        return f"checkpoint name {shown} is hidden"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in name):
        return f"checkpoint name {shown} holds control characters"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"checkpoint name {shown} is longer than {MAX_NAME_BYTES} bytes"
    if local_step(name) != step:
        return f"checkpoint name {shown} does not carry step {step}"
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


def retention_victims(
    found: list[RemoteCheckpointId],
    complete: set[RemoteCheckpointId],
    own_generation: int,
    keep_last: int,
) -> list[RemoteCheckpointId]:
    """This generation's checkpoints to delete so its newest `keep_last` complete ones remain.

    Only its own directories are touched (older generations' are out of its key's reach).
    Incomplete directories (no manifest: killed uploads) older than the oldest kept checkpoint
    go too; newer incomplete ones may still be in flight and stay. Nothing is deleted until
    `keep_last` complete ones exist, so a deletion always has a newer manifest behind it.
    """
    mine = [c for c in found if c.generation == own_generation]
    kept = sorted((c for c in mine if c in complete), reverse=True)[:keep_last]
    if len(kept) < keep_last:
        return []
    oldest_kept = kept[-1]
    return sorted(c for c in mine if c < oldest_kept)


def local_step(name: str) -> int | None:
    """The step of a local checkpoint: the number after `step=` when the name has one
    (Lightning's `{step}`: `epoch=0-step=50-val_loss=0.12.ckpt` → 50, `epoch=0-step=50-v1.ckpt`
    → 50), else the last number in a directory's name, or in a file's name without its suffix
    (`checkpoint-500` → 500, `model.h5` → None)."""
    stem = _without_suffix(name)
    match = _STEP_KEY.search(stem) or _LAST_NUMBER.search(stem)
    return int(match.group(1)) if match else None


def _without_suffix(name: str) -> str:
    """`name` without a last `.suffix` that is a plain extension (letters first: `.ckpt`,
    `.pt`, `.h5`); a number after a dot (`ckpt.500`) stays, it is the step."""
    stem, dot, suffix = name.rpartition(".")
    if dot and stem and re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,15}", suffix):
        return stem
    return name


def sibling_marker_name(name: str, marker: str) -> str:
    """The marker that says the single-file checkpoint `name` is complete, next to it:
    `epoch=0-step=50.ckpt` with the marker `.tether-complete` → `epoch=0-step=50.ckpt.tether-
    complete` (`COMPLETE` → `….ckpt.COMPLETE`)."""
    return f"{name}.{marker.lstrip('.') or marker}"


def restore_name(manifest: Manifest) -> str:
    """Where a checkpoint is restored in the checkpoint dir: the name it was saved under, or
    `checkpoint-<step>` for a manifest that does not record it."""
    return manifest.name if manifest.name is not None else restore_dirname(manifest.step)


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
