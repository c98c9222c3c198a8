"""Uploads the job's outputs dir (spec `outputs.dir`, `TETHER_OUTPUTS_DIR`) once, at the end.

When: the training exited 0, or it was stopped from outside (stop, cancel, lease expiry, SIGTERM)
after its final checkpoint went up; never for a superseded generation (whose storage is
cancelled). Where: this generation's own prefix, `g<generation>/outputs/files/<path>`, then,
written last, `g<generation>/outputs/manifest.json` listing every file's size and sha256 (of the
bytes actually sent), in the checkpoints' manifest format (`step`: the step training reached).

An empty or missing outputs dir still gets its manifest, listing no files: the job's result is
then "nothing", said in the log, and the job can end FINISHED (the control plane waits for the
manifest, not for files). The heartbeat reports the upload as an `OutputsRef` (manifest key,
its sha256, file and byte counts), which the control plane records.
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from tether_agent.checkpoints import (
    MAX_MANIFEST_FILES,
    Manifest,
    ManifestFile,
    output_files_prefix,
    outputs_manifest_key,
)
from tether_agent.protocol import MAX_OUTPUT_FILES, OutputsRef
from tether_agent.storage import Storage, StorageError

log = logging.getLogger(__name__)
MAX_FILES = min(MAX_MANIFEST_FILES, MAX_OUTPUT_FILES)


class OutputsTooMany(StorageError):
    """More files than one manifest may list."""


def upload_outputs(
    storage: Storage, outputs_dir: Path, generation: int, step: int, *, file_concurrency: int = 4
) -> OutputsRef:
    """Upload every file under `outputs_dir`, then the manifest; the reference to report."""
    files = sorted(p for p in outputs_dir.rglob("*") if p.is_file()) if outputs_dir.is_dir() else []
    if len(files) > MAX_FILES:
        raise OutputsTooMany(f"{outputs_dir} holds {len(files)} files (at most {MAX_FILES})")
    relative = [f.relative_to(outputs_dir).as_posix() for f in files]
    base = output_files_prefix(storage.prefix, generation)
    log.info("uploading outputs %s (%d files) to %s", outputs_dir, len(files), base)
    with ThreadPoolExecutor(max_workers=file_concurrency, thread_name_prefix="s3-out") as pool:
        futures = [
            pool.submit(storage.upload_file, f, base + rel)
            for f, rel in zip(files, relative, strict=True)
        ]
        try:
            results = [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    manifest = Manifest(
        step=step,
        generation=generation,
        created_at=datetime.now(UTC),
        files=[
            ManifestFile(path=rel, size=size, sha256=sha)
            for rel, (size, sha) in zip(relative, results, strict=True)
        ],
    )
    key = outputs_manifest_key(storage.prefix, generation)
    data = manifest.model_dump_json(indent=1).encode()
    storage.put_bytes(key, data, "application/json")  # last: now the outputs exist
    return OutputsRef(
        generation=generation,
        manifest_key=key,
        manifest_sha256=hashlib.sha256(data).hexdigest(),
        files=len(files),
        bytes=manifest.total_bytes,
    )
