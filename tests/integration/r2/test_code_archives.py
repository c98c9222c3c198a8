"""`CodeBucket` against the R2 front as the local stack runs it (rclone serve s3, keys minted by
the Cloudflare simulator): the presigned PUT, the size and hash checks, and the scoped
server-side copy into the job's prefix, which the job's read-only key then reads."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import httpx
import pytest

from functions.adapters.cloudflare import Permission, TempCredentials
from functions.adapters.code_bucket import ArchiveChanged, ArchiveMissing, CodeBucket
from tests.integration.r2_harness import BUCKET, R2

CONTENT = b"\x1f\x8b" + bytes(range(256)) * 40
SHA = hashlib.sha256(CONTENT).hexdigest()


def bucket(r2: R2, minted: list[tuple[str, tuple[str, ...], str]]) -> CodeBucket:
    def mint(
        prefix: str, objects: Sequence[str], permission: Permission, ttl_s: int
    ) -> TempCredentials:
        minted.append((prefix, tuple(objects), permission))
        creds = r2.mint(
            prefixes=[prefix] if prefix else None,
            objects=list(objects) or None,
            permission=permission,
            ttl_s=ttl_s,
        )
        return TempCredentials(
            creds.access_key_id, creds.secret_access_key, creds.session_token, time.time() + ttl_s
        )

    return CodeBucket(endpoint=r2.url, bucket=BUCKET, mint=mint)


def test_upload_through_the_presigned_put_then_check_and_copy(r2: R2) -> None:
    minted: list[tuple[str, tuple[str, ...], str]] = []
    store = bucket(r2, minted)
    assert store.size_of(SHA) is None and store.sha256_of(SHA, 10**6) is None
    key, url, _ = store.presign_put(SHA, 600)
    assert key == f"code/{SHA}.tar.gz"
    put = httpx.put(url, content=CONTENT, headers={"content-length": str(len(CONTENT))})
    assert put.status_code == 200, put.text
    assert store.size_of(SHA) == len(CONTENT)
    assert store.sha256_of(SHA, 10**6) == (len(CONTENT), SHA)
    # Each key is scoped to exactly what it touches.
    assert minted[2] == ("", (key,), "object-read-write")
    assert {m[2] for m in minted[:2] + minted[3:]} == {"object-read-only"}

    minted.clear()
    assert store.copy_to_job(SHA, "j-1", len(CONTENT)) == "copied"
    assert minted == [("jobs/j-1/code/", (key,), "object-read-write")]
    assert store.copy_to_job(SHA, "j-1", len(CONTENT)) == "present"  # idempotent
    reader = r2.client(r2.mint(prefixes=["jobs/j-1/"], permission="object-read-only"))
    got = reader.get_object(Bucket=BUCKET, Key=f"jobs/j-1/code/{SHA}.tar.gz")["Body"].read()
    assert got == CONTENT


def test_a_presigned_put_cannot_write_another_key(r2: R2) -> None:
    store = bucket(r2, [])
    _, url, _ = store.presign_put("cd" * 32, 600)
    other = url.replace("cd" * 32, "ef" * 32, 1)
    assert httpx.put(other, content=b"x").status_code in (401, 403)


def test_a_copy_of_a_missing_upload_says_so(r2: R2) -> None:
    store = bucket(r2, [])
    with pytest.raises(ArchiveMissing, match="is gone or changed"):
        store.copy_to_job("0" * 64, "j-2", 10)


def test_an_upload_swapped_after_the_submit_is_not_copied_into_the_job(r2: R2) -> None:
    """A PUT URL handed out before the archive existed still works after the upload (presigned
    URLs cannot be revoked): bytes of the same size written through it after the submit's check
    are refused at the copy, and the job gets no copy of them."""
    store = bucket(r2, [])
    _, url, _ = store.presign_put(SHA, 600)
    _, early_url, _ = store.presign_put(SHA, 600)  # another caller's, handed out meanwhile
    assert httpx.put(url, content=CONTENT).status_code == 200
    assert store.sha256_of(SHA, 10**6) == (len(CONTENT), SHA)  # what the submit checks
    swapped = b"\x1f\x8b" + b"y" * (len(CONTENT) - 2)
    assert httpx.put(early_url, content=swapped).status_code == 200
    with pytest.raises(ArchiveChanged, match="changed since the job was submitted"):
        store.copy_to_job(SHA, "j-3", len(CONTENT))
    reader = r2.client(r2.mint(prefixes=["jobs/j-3/"], permission="object-read-only"))
    listed = reader.list_objects_v2(Bucket=BUCKET, Prefix="jobs/j-3/")
    assert listed.get("KeyCount", 0) == 0

    # Put back (a broken upload may be replaced), the next transition copies it.
    assert httpx.put(url, content=CONTENT).status_code == 200
    assert store.copy_to_job(SHA, "j-3", len(CONTENT)) == "copied"


def test_a_job_copy_that_does_not_hash_to_its_name_is_copied_again(r2: R2) -> None:
    store = bucket(r2, [])
    _, url, _ = store.presign_put(SHA, 600)
    assert httpx.put(url, content=CONTENT).status_code == 200
    writer = r2.client(r2.mint(prefixes=["jobs/j-4/"], permission="object-read-write"))
    dest = f"jobs/j-4/code/{SHA}.tar.gz"
    writer.put_object(Bucket=BUCKET, Key=dest, Body=b"z" * len(CONTENT))  # right size only
    assert store.copy_to_job(SHA, "j-4", len(CONTENT)) == "copied"
    assert writer.get_object(Bucket=BUCKET, Key=dest)["Body"].read() == CONTENT
