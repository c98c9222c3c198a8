"""Restore the newest verified checkpoint before training starts (rule: `checkpoints.py`)."""

from __future__ import annotations

import logging
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tether_agent.checkpoints import (
    Manifest,
    ManifestFile,
    RemoteCheckpointId,
    file_problem,
    manifest_problem,
    restore_candidates,
    restore_dirname,
)
from tether_agent.protocol import CheckpointRef
from tether_agent.storage import IntegrityError, Storage, StorageError, TransferCancelled

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    ref: CheckpointRef
    local_dir: Path
    skipped: tuple[str, ...]  # why newer candidates were passed over


class RestoreError(Exception):
    """Storage could not be read at all (not a bad checkpoint: that falls back)."""


def restore_latest(
    storage: Storage, generation: int, checkpoint_dir: Path, file_concurrency: int = 4
) -> Restored | None:
    """Download the best checkpoint into `checkpoint_dir/checkpoint-<step>`; None = fresh start."""
    try:
        candidates = restore_candidates(storage.list_checkpoints(), generation)
    except StorageError as exc:
        raise RestoreError(f"cannot list checkpoints: {exc}") from exc
    skipped: list[str] = []
    for cid in candidates:
        problem = _try_restore(storage, cid, checkpoint_dir, file_concurrency)
        if isinstance(problem, Path):
            ref = CheckpointRef(
                step=cid.step,
                generation=cid.generation,
                manifest_key=cid.manifest_key(storage.prefix),
            )
            log.info("restored checkpoint %s into %s", cid.dirname, problem)
            return Restored(ref, problem, tuple(skipped))
        log.warning("checkpoint %s not restorable: %s", cid.dirname, problem)
        skipped.append(f"{cid.dirname}: {problem}")
    log.info("no restorable checkpoint: starting fresh")
    return None


def _try_restore(
    storage: Storage, cid: RemoteCheckpointId, checkpoint_dir: Path, file_concurrency: int
) -> Path | str:
    """The restored directory, or why this candidate was rejected."""
    try:
        manifest = storage.read_manifest(cid)
    except ValidationError as exc:
        return f"malformed manifest ({exc.error_count()} errors)"
    except StorageError as exc:
        raise RestoreError(str(exc)) from exc
    if manifest is None:
        return "no manifest (incomplete upload)"
    problem = manifest_problem(manifest, cid)
    if problem:
        return problem

    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    staging = checkpoint_dir / f".tether-restore-{cid.dirname}"
    shutil.rmtree(staging, ignore_errors=True)
    problem = _download_all(storage, cid, manifest, staging, file_concurrency)
    if problem:
        shutil.rmtree(staging, ignore_errors=True)
        return problem
    final = checkpoint_dir / restore_dirname(cid.step)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def _download_all(
    storage: Storage, cid: RemoteCheckpointId, manifest: Manifest, staging: Path, workers: int
) -> str | None:
    base = cid.dir_key(storage.prefix)

    def fetch(entry: ManifestFile) -> str | None:
        dest = staging / entry.path
        try:
            digest = storage.download_file(base + entry.path, dest, entry.size)
        except IntegrityError as exc:
            return str(exc)
        except TransferCancelled:
            raise
        except StorageError as exc:
            raise RestoreError(str(exc)) from exc
        return file_problem(entry, dest.stat().st_size, digest)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="restore") as pool:
        results = list(pool.map(fetch, manifest.files))
    problems = [r for r in results if r]
    return problems[0] if problems else None
