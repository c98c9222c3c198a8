"""Restore the newest usable recorded checkpoint before training starts (rule: `checkpoints.py`).

The candidates are the checkpoints the control plane recorded, newest first, as the agent was
given them at start. Each is tried in order; anything at all that goes wrong on one (a bad or
tampered manifest, a missing or altered file, an exception nobody foresaw) skips it with a
reason, and the next is tried. Only the one case where no candidate could be judged because
storage itself could not be read (a network or service failure on every attempt, a refusal of
the read key) ends in `unreadable`: a fresh start would throw away recorded work, so the agent
fails the generation instead and says why.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter, ValidationError

from tether_agent.checkpoints import (
    DEFAULT_MARKER,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestFile,
    RemoteCheckpointId,
    candidate_problem,
    file_problem,
    manifest_problem,
    restore_name,
    sibling_marker_name,
)
from tether_agent.protocol import (
    MAX_REASON,
    MAX_RESTORE_CANDIDATES,
    CheckpointRef,
    RestoreReport,
    SkippedCheckpoint,
)
from tether_agent.storage import IntegrityError, Storage, StorageError, TransferCancelled

log = logging.getLogger(__name__)
_CANDIDATES = TypeAdapter(list[CheckpointRef])


@dataclass(frozen=True)
class Restored:
    ref: CheckpointRef
    local_dir: Path


@dataclass(frozen=True)
class RestoreResult:
    restored: Restored | None  # None: nothing restored (see `report.outcome`)
    report: RestoreReport


class Skip(Exception):
    """A candidate that cannot be restored, and why (the message)."""


class _Unreadable(Exception):
    """Storage failed, not the candidate: the reason, for the report."""


def parse_candidates(raw: str | None) -> tuple[list[CheckpointRef], str | None]:
    """The candidates from the environment's JSON list, and why they could not be read."""
    if not raw:
        return [], None
    try:
        return _CANDIDATES.validate_json(raw)[:MAX_RESTORE_CANDIDATES], None
    except ValidationError as exc:
        return [], f"the recorded checkpoint list is unreadable ({exc.error_count()} errors)"


def restore_latest(
    storage: Storage,
    candidates: Sequence[CheckpointRef],
    generation: int,
    checkpoint_dir: Path,
    file_concurrency: int = 4,
    *,
    marker: str = DEFAULT_MARKER,
) -> RestoreResult:
    """Try `candidates` in order; download the first usable one into `checkpoint_dir` under the
    name it was saved as (a directory or a file, `checkpoints.restore_name`; a file gets its
    sibling marker). Never raises for a candidate: see the module docstring."""
    skipped: list[SkippedCheckpoint] = []
    unreadable = False
    for ref in candidates[:MAX_RESTORE_CANDIDATES]:
        try:
            local = _restore_candidate(
                storage, ref, generation, checkpoint_dir, file_concurrency, marker
            )
        except TransferCancelled:
            raise  # superseded or shutting down: not the candidate's fault
        except _Unreadable as exc:
            unreadable = True
            skipped.append(_skip(ref, f"storage unreadable: {exc}"))
            continue
        except Skip as exc:
            skipped.append(_skip(ref, str(exc)))
            continue
        except Exception as exc:  # any exception on a candidate is a skip
            log.exception("restore candidate %s failed unexpectedly", ref.manifest_key)
            skipped.append(_skip(ref, f"{type(exc).__name__}: {exc}"))
            continue
        log.info("restored checkpoint %s into %s", ref.manifest_key, local)
        report = RestoreReport(outcome="restored", candidates=len(candidates), skipped=skipped)
        return RestoreResult(Restored(ref, local), report)
    outcome: Literal["fresh", "unreadable"] = "unreadable" if unreadable else "fresh"
    if outcome == "unreadable":
        log.error("no recorded checkpoint could be read (%d): storage unreadable", len(candidates))
    elif candidates:
        log.warning(
            "no usable checkpoint among %d recorded: starting from scratch", len(candidates)
        )
    else:
        log.info("no checkpoint recorded: starting fresh")
    report = RestoreReport(outcome=outcome, candidates=len(candidates), skipped=skipped)
    return RestoreResult(None, report)


def _skip(ref: CheckpointRef, reason: str) -> SkippedCheckpoint:
    log.warning("checkpoint %s skipped: %s", ref.manifest_key, reason)
    text = " ".join(reason.split())[:MAX_REASON] or "unknown"
    return SkippedCheckpoint(manifest_key=ref.manifest_key, reason=text)


def _restore_candidate(
    storage: Storage,
    ref: CheckpointRef,
    generation: int,
    checkpoint_dir: Path,
    file_concurrency: int,
    marker: str,
) -> Path:
    """The restored directory; raises Skip (the candidate is bad) or _Unreadable."""
    cid, problem = candidate_problem(ref, storage.prefix, generation)
    if cid is None:
        raise Skip(problem or "not a candidate")
    base = cid.dir_key(storage.prefix)
    try:
        sizes = storage.list_sizes(base)
    except TransferCancelled:
        raise
    except StorageError as exc:
        raise _Unreadable(str(exc)) from exc
    manifest = _read_manifest(storage, ref, cid, sizes.get(base + MANIFEST_NAME))
    for entry in manifest.files:
        found = sizes.get(base + entry.path)
        if found is None:
            raise Skip(f"{entry.path}: not in the bucket")
        if found != entry.size:
            raise Skip(f"{entry.path}: {found} bytes in the bucket, manifest says {entry.size}")
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(checkpoint_dir).free
    if manifest.total_bytes > free:
        raise Skip(f"needs {manifest.total_bytes} bytes, the disk has {free} free")

    staging = checkpoint_dir / f".tether-restore-g{cid.generation}-{cid.dirname}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _download_all(storage, base, manifest, staging, file_concurrency)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    final = checkpoint_dir / restore_name(manifest)
    _remove(final)
    if manifest.kind == "file":
        (staging / final.name).rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        _write_sibling_marker(final, marker)
    else:
        staging.rename(final)
    return final


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_sibling_marker(restored: Path, marker: str) -> None:
    """A restored file checkpoint is marked as the hooks mark one: atomically, after the file."""
    sibling = restored.parent / sibling_marker_name(restored.name, marker)
    tmp = restored.parent / f".{sibling.name}.tmp"
    tmp.write_text('{"restored": true}')
    tmp.replace(sibling)


def _read_manifest(
    storage: Storage, ref: CheckpointRef, cid: RemoteCheckpointId, listed_size: int | None
) -> Manifest:
    """The manifest, once its bytes hash to the recorded sha256 and it stands for `cid`."""
    if listed_size is None:
        raise Skip("no manifest in the bucket")
    if listed_size > MAX_MANIFEST_BYTES:
        raise Skip(f"manifest of {listed_size} bytes (at most {MAX_MANIFEST_BYTES})")
    try:
        data = storage.get_bytes(ref.manifest_key)
    except TransferCancelled:
        raise
    except StorageError as exc:
        raise _Unreadable(str(exc)) from exc
    if data is None:
        raise Skip("no manifest in the bucket")
    if hashlib.sha256(data).hexdigest() != ref.manifest_sha256:
        raise Skip("manifest sha256 differs from the recorded one")
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        raise Skip(f"malformed manifest ({exc.error_count()} errors)") from exc
    problem = manifest_problem(manifest, cid)
    if problem:
        raise Skip(problem)
    return manifest


def _download_all(
    storage: Storage, base: str, manifest: Manifest, staging: Path, workers: int
) -> None:
    def fetch(entry: ManifestFile) -> str | None:
        dest = staging / entry.path
        try:
            digest = storage.download_file(base + entry.path, dest, entry.size)
        except IntegrityError as exc:
            return str(exc)
        except TransferCancelled:
            raise
        except StorageError as exc:
            raise _Unreadable(str(exc)) from exc
        return file_problem(entry, dest.stat().st_size, digest)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="restore") as pool:
        results = list(pool.map(fetch, manifest.files))
    problems = [r for r in results if r]
    if problems:
        raise Skip(problems[0])


RESTORE_CHECKPOINTS_VAR = "TETHER_RESTORE_CHECKPOINTS"


def restore_recorded(
    storage: Storage,
    raw_candidates: str | None,
    generation: int,
    checkpoint_dir: Path,
    file_concurrency: int = 4,
    *,
    marker: str = DEFAULT_MARKER,
) -> RestoreResult:
    """`restore_latest` over the recorded list as the environment gives it; a list that cannot
    be read is reported once, as a skip of the whole list, and training starts fresh."""
    candidates, unreadable = parse_candidates(raw_candidates)
    result = restore_latest(
        storage, candidates, generation, checkpoint_dir, file_concurrency, marker=marker
    )
    if not unreadable:
        return result
    skip = SkippedCheckpoint(manifest_key=RESTORE_CHECKPOINTS_VAR, reason=unreadable)
    return RestoreResult(result.restored, result.report.model_copy(update={"skipped": [skip]}))


def skip_reasons(report: RestoreReport) -> str:
    return "; ".join(f"{s.manifest_key}: {s.reason}" for s in report.skipped)
