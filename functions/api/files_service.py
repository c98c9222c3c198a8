"""`GET /jobs/{id}/files?outputs=true | ?checkpoint=STEP`: a recorded checkpoint's or the job's
outputs' files as presigned GET URLs, each with the size and sha256 its manifest lists, for
`tether download` to fetch and verify, and, for a checkpoint, the name it was saved under and
whether it is a single file (`name`, `kind`: a single-file checkpoint lists that one file).

Only what the control plane recorded is offered: a checkpoint of `job.recorded_checkpoints` (the
newest recorded one at that step) or the outputs recorded on the current generation's heartbeat
(`functions/domain/outputs_record.py`). The manifest is read from R2 with a read-only key of its
own directory and trusted only when its bytes hash to the recorded sha256. Files are paged
(`offset`, `limit`): a manifest may list up to 100,000 files, more than one reply holds.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.adapters.factory import SecretNotSet
from functions.api.job_service import JOB_ID_SHAPE
from functions.api.logs_service import URL_TTL_S, LogsDeps
from functions.domain.errors import DomainError, FieldError, Invalid, NotFound, Unavailable
from functions.domain.storage_layout import (
    checkpoint_dir_key,
    output_files_prefix,
    outputs_prefix,
)

MAX_PAGE = 500
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # as the agent's restore reads them
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class FilesUnavailable(Unavailable):
    """The files cannot be listed right now (Cloudflare or R2 down, secret unset)."""


class _File(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(min_length=1, max_length=4096)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA256.pattern)


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    files: list[_File]
    # A checkpoint's local name as saved and whether it is one file (the agent's
    # `tether_agent.checkpoints.Manifest`); older manifests have neither.
    name: str | None = Field(default=None, max_length=1024)
    kind: Literal["directory", "file"] = "directory"


@dataclass(frozen=True)
class _Source:
    what: str  # "outputs" | "checkpoint"
    step: int | None
    generation: int
    manifest_key: str
    manifest_sha256: str
    files_prefix: str  # each file's key is this + its path
    read_prefix: str  # what the read-only key is minted for


def list_files(
    deps: LogsDeps,
    job_id: str,
    *,
    outputs: bool,
    checkpoint: int | None,
    offset: int,
    limit: int,
) -> dict[str, Any]:
    if outputs == (checkpoint is not None):
        raise Invalid(
            "say what to download",
            [
                FieldError(
                    path="query", reason="give exactly one of outputs=true or checkpoint=STEP"
                )
            ],
        )
    job = deps.store.get_job(job_id) if JOB_ID_SHAPE.match(job_id) else None
    if job is None:
        raise NotFound(f"no job {job_id!r}", [FieldError(path="path.id", reason="unknown job")])
    source = (
        _checkpoint(job_id, job.recorded_checkpoints, checkpoint)
        if checkpoint is not None
        else _outputs(deps, job_id, job.current_generation)
    )
    try:
        bucket = deps.bucket()
        raw = bucket.get_bytes(source.read_prefix, source.manifest_key, MAX_MANIFEST_BYTES)
        if raw is None or hashlib.sha256(raw).hexdigest() != source.manifest_sha256:
            raise FilesUnavailable(
                f"the recorded manifest {source.manifest_key} is missing or changed in storage"
            )
        manifest = _Manifest.model_validate_json(raw)
        bad = [f.path for f in manifest.files if not _safe(f.path)]
        if bad:
            raise FilesUnavailable(f"the manifest {source.manifest_key} names an unsafe path")
        page = manifest.files[offset : offset + limit]
        files = []
        for entry in page:
            key = source.files_prefix + entry.path
            url, expires_at = bucket.presign_get(source.read_prefix, key, URL_TTL_S)
            files.append({**entry.model_dump(), "url": url, "expires_at": expires_at})
    except DomainError:
        raise
    except ValidationError:
        raise FilesUnavailable(f"the manifest {source.manifest_key} does not parse") from None
    except Exception as exc:
        raise FilesUnavailable(_unavailable_reason(exc)) from None
    end = offset + len(page)
    return {
        "job_id": job_id,
        "what": source.what,
        "step": source.step,
        "generation": source.generation,
        "manifest_key": source.manifest_key,
        "manifest_sha256": source.manifest_sha256,
        "name": manifest.name if _one_component(manifest.name) else None,
        "kind": manifest.kind,
        "total_files": len(manifest.files),
        "total_bytes": sum(f.size for f in manifest.files),
        "files": files,
        "next_offset": end if end < len(manifest.files) else None,
    }


def _outputs(deps: LogsDeps, job_id: str, current: int) -> _Source:
    generation = deps.store.get_generation(job_id, current) if current else None
    ref = generation.heartbeat.outputs if generation and generation.heartbeat else None
    if ref is None:
        raise NotFound(
            f"job {job_id} has no uploaded outputs yet",
            [FieldError(path="query.outputs", reason="no outputs recorded for this job")],
        )
    return _Source(
        what="outputs",
        step=None,
        generation=ref.generation,
        manifest_key=ref.manifest_key,
        manifest_sha256=ref.manifest_sha256,
        files_prefix=output_files_prefix(job_id, ref.generation),
        read_prefix=outputs_prefix(job_id, ref.generation),
    )


def _checkpoint(job_id: str, recorded: Any, step: int) -> _Source:
    found = [r for r in recorded if r.step == step and r.manifest_sha256]
    if not found:
        steps = ", ".join(str(r.step) for r in recorded) or "none"
        raise NotFound(
            f"job {job_id} has no recorded checkpoint at step {step}",
            [FieldError(path="query.checkpoint", reason=f"recorded steps: {steps}")],
        )
    ref = found[0]  # newest first: the current line of training
    prefix = checkpoint_dir_key(job_id, ref.step, ref.generation)
    return _Source(
        what="checkpoint",
        step=ref.step,
        generation=ref.generation,
        manifest_key=ref.manifest_key,
        manifest_sha256=ref.manifest_sha256,
        files_prefix=prefix,
        read_prefix=prefix,
    )


def _one_component(name: str | None) -> bool:
    """A checkpoint name the client may show and save under: one path component."""
    if not name:
        return False
    return name not in (".", "..") and "/" not in name and "\\" not in name


def _safe(path: str) -> bool:
    pure = PurePosixPath(path)
    return not pure.is_absolute() and ".." not in pure.parts and "\\" not in path


def _unavailable_reason(exc: Exception) -> str:
    if isinstance(exc, SecretNotSet):  # its message names the field to set, nothing secret
        return f"files are unavailable: {exc}"
    return f"files are unavailable right now ({type(exc).__name__}); try again shortly"
