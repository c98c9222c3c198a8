"""The job code archives in the R2 bucket (`functions/domain/code_archive.py` has the flow).

Every operation mints Cloudflare temporary credentials for exactly the keys it touches (the
control plane holds no R2 secret key of its own, `functions/adapters/r2.py`):

- `presign_put`: `object-read-write` on the one key `code/<sha256>.tar.gz`;
- `size_of`, `sha256_of`: `object-read-only` on that key;
- `copy_to_job`: `object-read-write` on that key and the prefix `jobs/<job_id>/code/`, for one
  server-side CopyObject (R2 reads the source under the same key's scope), then a streamed hash
  of the copy.

The copy is verified, not the source: a PUT URL handed out before the archive existed still
works until it expires (presigned URLs cannot be revoked), so the upload can change after the
submit checked it. Only the control plane writes under `jobs/<job_id>/code/`, so the bytes
hashed after the copy are the bytes every host will read; a copy that does not hash to its
name is deleted and the step fails with `ArchiveChanged`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.cloudflare import Permission, TempCredentials
from functions.adapters.r2 import r2_client
from functions.domain.storage_layout import code_upload_key, job_code_key, job_code_prefix

TTL_S = 900  # Cloudflare's minimum is what every operation here needs at most
_CHUNK = 1024 * 1024
_MISSING = {"404", "NoSuchKey", "NotFound"}

# (prefix or "", exact keys, permission, ttl_s) → credentials
Mint = Callable[[str, Sequence[str], Permission, int], TempCredentials]


class CodeBucket:
    """Code archives in one R2 bucket, with credentials from `mint`."""

    def __init__(
        self,
        *,
        endpoint: str,
        bucket: str,
        mint: Mint,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.endpoint = endpoint
        self.bucket = bucket
        self._mint = mint
        self._clock = clock

    def _client(
        self, prefix: str, objects: Sequence[str], permission: Permission
    ) -> tuple[Any, float]:
        creds = self._mint(prefix, objects, permission, TTL_S)
        client = r2_client(self.endpoint, creds, read_timeout=20)
        return client, creds.expires_at

    def presign_put(self, sha256: str, expires_s: int) -> tuple[str, str, float]:
        """(key, PUT URL, when it stops working) for the upload of `code/<sha256>.tar.gz`."""
        key = code_upload_key(sha256)
        client, creds_expire_at = self._client("", [key], "object-read-write")
        expires_s = max(1, min(expires_s, int(creds_expire_at - self._clock())))
        url = client.generate_presigned_url(
            "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
        )
        return key, str(url), self._clock() + expires_s

    def size_of(self, sha256: str) -> int | None:
        """The uploaded archive's size, None when there is none."""
        key = code_upload_key(sha256)
        client, _ = self._client("", [key], "object-read-only")
        return _head(client, self.bucket, key)

    def sha256_of(self, sha256: str, max_bytes: int) -> tuple[int, str] | None:
        """(bytes read, their sha256) of the uploaded archive, streamed; None when there is
        none. Reads at most `max_bytes` + 1 bytes (more than that: the size says so)."""
        key = code_upload_key(sha256)
        client, _ = self._client("", [key], "object-read-only")
        return _digest(client, self.bucket, key, max_bytes)

    def copy_to_job(self, sha256: str, job_id: str, size_bytes: int) -> str:
        """Copy the upload to `jobs/<job_id>/code/<sha256>.tar.gz` unless a copy with
        `size_bytes` that hashes to `sha256` is there already; returns "present" or "copied".
        The copy is hashed after it is made; one that does not match is deleted and
        `ArchiveChanged` raised. Raises `ArchiveMissing` when neither the job's copy nor the
        upload exists."""
        source, dest = code_upload_key(sha256), job_code_key(job_id, sha256)
        client, _ = self._client(job_code_prefix(job_id), [source], "object-read-write")
        wanted = (size_bytes, sha256)
        limit = size_bytes  # one byte more than the archive: a longer copy shows it
        there = _head(client, self.bucket, dest) == size_bytes
        if there and _digest(client, self.bucket, dest, limit) == wanted:
            return "present"
        if _head(client, self.bucket, source) != size_bytes:
            raise ArchiveMissing(f"{source} is gone or changed: the job's code cannot be copied")
        client.copy_object(
            Bucket=self.bucket, Key=dest, CopySource={"Bucket": self.bucket, "Key": source}
        )
        copied = _digest(client, self.bucket, dest, limit)
        if copied != wanted:
            client.delete_object(Bucket=self.bucket, Key=dest)
            got = "nothing" if copied is None else f"{copied[0]} bytes hashing to {copied[1]}"
            raise ArchiveChanged(
                f"{source} changed since the job was submitted: its copy is {got}, not "
                f"{size_bytes} bytes hashing to {sha256}; the copy was deleted (upload the "
                "archive again and resubmit)"
            )
        return "copied"


class ArchiveMissing(Exception):
    """The job's code archive is not in storage (deleted since the job was submitted)."""


class ArchiveChanged(ArchiveMissing):
    """The upload no longer holds the archive the job was submitted with (overwritten through a
    PUT URL handed out before it existed): its copy was refused and deleted."""


def _digest(client: Any, bucket: str, key: str, max_bytes: int) -> tuple[int, str] | None:
    """(bytes read, their sha256) of `key`, streamed, reading at most `max_bytes` + 1 bytes;
    None when there is no such object."""
    try:
        body = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{max_bytes}")["Body"]
    except ClientError as exc:
        if _code(exc) in _MISSING:
            return None
        raise
    digest, read = hashlib.sha256(), 0
    for chunk in iter(lambda: body.read(_CHUNK), b""):
        digest.update(chunk)
        read += len(chunk)
    return read, digest.hexdigest()


def _head(client: Any, bucket: str, key: str) -> int | None:
    try:
        return int(client.head_object(Bucket=bucket, Key=key)["ContentLength"])
    except ClientError as exc:
        if _code(exc) in _MISSING:
            return None
        raise


def _code(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return str(error.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
