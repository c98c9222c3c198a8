"""Code archives on the jobs API (`functions/domain/code_archive.py` has the whole flow).

`POST /code/uploads` `{sha256, size_bytes}` → a presigned PUT for `code/<sha256>.tar.gz`, or
`exists: true` when that object is already there with that size and content (the CLI then skips
the upload), or a 409 naming `size_bytes` when it is there, hashing to its name, with another
size: no PUT is ever handed out over an archive that hashes to its name, so a stored job's code
cannot be replaced through a new URL (the lifecycle's copy into the job is hashed too,
`functions/adapters/code_bucket.py`). `POST /jobs` with `code.archive` calls `verify_archive`
before the job is stored: the object must exist with that size and hash to that sha256 (it is
streamed and hashed here; `MAX_ARCHIVE_BYTES` bounds it), or the submit is refused with a 400
naming `code.archive` and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from functions.adapters.code_bucket import CodeBucket
from functions.adapters.factory import SecretNotSet
from functions.domain.code_archive import MAX_ARCHIVE_BYTES, UploadRequest
from functions.domain.errors import Conflict, FieldError, Invalid, Unavailable
from functions.domain.jobspec import CodeArchive, JobSpec
from functions.domain.storage_layout import code_upload_key

UPLOAD_URL_TTL_S = 600  # a 100 MiB upload over a slow link, with room to spare


class CodeUnavailable(Unavailable):
    """Storage cannot be reached right now (Cloudflare or R2 down, secret unset)."""


Bucket = Callable[[], CodeBucket | None]


def request_upload(bucket: Bucket, wanted: UploadRequest) -> dict[str, Any]:
    """Where to PUT the archive `wanted` describes, or that it is there already. No PUT is
    handed out over an archive that hashes to its name: the same size is `exists: true`,
    another size a `Conflict` naming `size_bytes`. An object under the key that does not hash
    to its name (a broken upload) may be replaced."""
    store = _bucket(bucket)
    key = code_upload_key(wanted.sha256)
    try:
        size = store.size_of(wanted.sha256)
        read = store.sha256_of(wanted.sha256, MAX_ARCHIVE_BYTES) if size is not None else None
    except Exception as exc:
        raise CodeUnavailable(_reason(exc)) from None
    if read is not None and read == (size, wanted.sha256):
        if size == wanted.size_bytes:
            return {"key": key, "exists": True, "url": None, "method": None, "expires_at": None}
        raise Conflict(
            f"{key} is already uploaded, with another size",
            [
                FieldError(
                    path="size_bytes",
                    reason=f"the uploaded archive with this sha256 has {size} bytes, "
                    f"not {wanted.size_bytes}",
                )
            ],
        )
    try:
        key, url, expires_at = store.presign_put(wanted.sha256, UPLOAD_URL_TTL_S)
    except Exception as exc:
        raise CodeUnavailable(_reason(exc)) from None
    return {
        "key": key,
        "exists": False,
        "url": url,
        "method": "PUT",
        "expires_at": expires_at,
    }


def verify_archive(bucket: Bucket, spec: JobSpec) -> None:
    """Refuse (400 naming the field) a spec whose code is a directory not yet packed, or an
    archive that is not in storage exactly as described."""
    code = spec.code
    if code is None or (code.dir is None and code.archive is None):
        return
    if code.archive is None:
        raise Invalid(
            "code.dir is packed and uploaded by `tether submit`; the API takes code.archive",
            [
                FieldError(
                    path="code.dir",
                    reason="send code.archive {sha256, size_bytes} of an uploaded archive",
                )
            ],
        )
    archive: CodeArchive = code.archive
    store = _bucket(bucket)
    try:
        size = store.size_of(archive.sha256)
        read = store.sha256_of(archive.sha256, MAX_ARCHIVE_BYTES) if size is not None else None
    except Exception as exc:
        raise CodeUnavailable(_reason(exc)) from None
    if size is None or read is None:
        raise _refused(
            "code.archive",
            f"no uploaded archive with sha256 {archive.sha256} (upload it first: "
            "POST /code/uploads)",
        )
    if size != archive.size_bytes:
        raise _refused(
            "code.archive.size_bytes",
            f"the uploaded archive has {size} bytes, not {archive.size_bytes}",
        )
    if read[1] != archive.sha256:
        raise _refused(
            "code.archive.sha256",
            f"the uploaded archive's content hashes to {read[1]}, not {archive.sha256}",
        )


def _refused(path: str, reason: str) -> Invalid:
    return Invalid(
        "the job's code archive is not in storage as described",
        [FieldError(path=path, reason=reason)],
    )


def _bucket(bucket: Bucket) -> CodeBucket:
    try:
        store = bucket()
    except Exception as exc:
        raise CodeUnavailable(_reason(exc)) from None
    if store is None:
        raise CodeUnavailable(
            "this deployment has no storage configured for code archives "
            "(the jobs function lacks TETHER_CLOUDFLARE_SECRET_ARN)"
        )
    return store


def _reason(exc: Exception) -> str:
    if isinstance(exc, SecretNotSet):  # its message names the field to set, nothing secret
        return f"code archives are unavailable: {exc}"
    return f"code archives are unavailable right now ({type(exc).__name__}); try again shortly"
