"""S3/R2 adapter: credentials that can be swapped while transfers run, parallel multipart
uploads hashed with sha256 in the same single pass that reads the file, and parallel ranged
downloads hashed from the file in order as their bytes land (`ranged_download`).

Failure handling, per request: network errors and 5xx retry with backoff. R2 says two different
things with 401 and 403, and they are treated as such:
- 401 `Unauthorized` (and the other "these credentials no longer work" codes: expired token,
  unknown key, wrong signature): the credentials expired, were revoked or rotated. The call waits
  for newer credentials from a heartbeat reply (the store swaps them atomically) and retries with
  them; without new ones it counts as a failed attempt.
- 403 `AccessDenied`: the credentials work, but this operation is outside their scope (bucket,
  prefix, permission). Retrying with credentials of the same scope cannot help, so it raises
  `AccessDenied` (after one retry if newer credentials arrived meanwhile, or as a 401 when the
  credentials have expired by the local clock), and callers report it instead of retrying. Real
  R2 may answer 403 where the local front answers 401 (a key revoked or expired early), so the
  first 403 on a credentials version is taken as "maybe stale": calls wait for newer credentials
  until `stale_wait_s` after it (one heartbeat interval on a host) and retry with them; without
  them, and for every later 403 on that version, it is a refusal at once.
`NoSuchUpload` (the server lost the multipart upload) restarts that file's upload from the first
part; 404 is "not there", never a refusal. A failed upload is aborted so no multipart upload is
left open.

The credentials themselves, and the S3 clients built from them, live in `storage_credentials`.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from tether_agent.checkpoints import (
    MIB,
    Manifest,
    RemoteCheckpointId,
    checkpoints_prefix,
    parse_remote_dir,
    part_size_for,
)
from tether_agent.ranged_download import (
    Landing,
    RangeStopped,
    fetch_and_hash,
    get_range,
    spans,
    thread_buffer,
)
from tether_agent.storage_credentials import Credentials, CredentialStore

log = logging.getLogger(__name__)
T = TypeVar("T")

# The credentials do not work (any more): wait for fresh ones from a heartbeat reply.
CREDENTIAL_ERRORS = frozenset(
    {
        "Unauthorized",
        "401",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
    }
)
# The credentials work, the operation is out of their scope: report, do not retry.
DENIED_ERRORS = frozenset({"AccessDenied", "Forbidden", "403"})
NOT_FOUND = frozenset({"NoSuchKey", "404", "NotFound"})


class StorageError(Exception):
    """A transfer failed after its retries."""


class TransferCancelled(StorageError):
    """The agent was told to stop transferring (superseded or shutting down)."""


class AccessDenied(StorageError):
    """The storage refused an operation as out of the credentials' scope (R2's 403
    AccessDenied). Not retried: credentials of the same scope would be refused the same way."""

    def __init__(self, what: str, bucket: str, access_key_id: str) -> None:
        self.what = what
        super().__init__(
            f"{what}: AccessDenied (out of the scope of the storage credentials for bucket "
            f"{bucket}, key {access_key_id[:4]}…)"
        )


class UploadLost(StorageError):
    """The server no longer knows the multipart upload; the file must start again."""


class IntegrityError(StorageError):
    """Downloaded bytes do not match the manifest."""


class RateLimiter:
    """Token bucket shared by all transfer threads (optional bandwidth cap)."""

    def __init__(self, bytes_per_s: float | None) -> None:
        self._rate = bytes_per_s
        self._lock = threading.Lock()
        self._next_free = time.monotonic()

    def acquire(self, nbytes: int) -> None:
        if not self._rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + nbytes / self._rate
        if start > now:
            time.sleep(start - now)


@dataclass
class TransferStats:
    bytes_uploaded: int = 0
    bytes_downloaded: int = 0
    # Ranged GETs by how their bodies were read (`ranged_download.body_reader`): a benchmark
    # says which path its restores took.
    read_paths: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, up: int = 0, down: int = 0) -> None:
        with self._lock:
            self.bytes_uploaded += up
            self.bytes_downloaded += down

    def add_read_path(self, path: str) -> None:
        with self._lock:
            self.read_paths[path] = self.read_paths.get(path, 0) + 1


def _expired(creds: Credentials) -> bool:
    return creds.expires_at is not None and creds.expires_at <= time.time()


def error_code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    code = str(err.get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code or str(status or "")


class Storage:
    """Everything the agent does with the bucket, under the job's prefix `prefix`, with the
    credentials of `store`: the agent holds two, one per key (the read-only key on the job's
    prefix restores; the read-write key on its generation's prefix uploads checkpoints and
    logs), sharing the cancel event and the transfer counts."""

    def __init__(
        self,
        store: CredentialStore,
        prefix: str,
        *,
        concurrency: int = 8,
        part_size: int = 16 * MIB,
        limiter: RateLimiter | None = None,
        nice: int = 0,
        max_attempts: int = 8,
        backoff_s: float = 0.5,
        credential_wait_s: float = 60.0,
        stale_wait_s: float = 10.0,
        cancel: threading.Event | None = None,
        stats: TransferStats | None = None,
    ) -> None:
        self.store = store
        self.prefix = prefix
        self.part_size = part_size
        self.limiter = limiter or RateLimiter(None)
        self.stats = stats or TransferStats()
        self.cancel = cancel or threading.Event()
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._credential_wait_s = credential_wait_s
        self._stale_wait_s = stale_wait_s
        self._doubt_lock = threading.Lock()
        self._doubted_until: dict[int, float] = {}  # credentials version → monotonic deadline
        self._nice = nice
        # Upload parts in memory at once (read but not yet sent).
        self._window = threading.BoundedSemaphore(concurrency * 2)
        # Ranged GETs: 64 MiB for large files (a 1 GiB file in 16 MiB ranges took 64–83 s on
        # the local stack, in 64 MiB ones 22–24 s), about a quarter of a smaller file, at least
        # 16 MiB, so it is not one stream (a 128 MiB checkpoint: 1.0–1.6 s against 1.5–2.2 s).
        # A range costs no memory of its own: it streams through its thread's reused buffer
        # (`thread_buffer`), and the pool's `concurrency` threads bound the ranges in flight.
        self.download_range = max(64 * MIB, part_size)
        self.min_download_range = max(16 * MIB, part_size)
        self._pool = ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="s3-part", initializer=self._lower_priority
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """`fn(*args)` on the transfer pool. A storage closed meanwhile (the agent shutting
        down) refuses new work as its queued work was dropped: cancelled, not the pool's
        RuntimeError, so a transfer that was starting fails the way one under way does."""
        try:
            return self._pool.submit(fn, *args)
        except RuntimeError as exc:  # "cannot schedule new futures after shutdown"
            raise CancelledError("the storage was closed") from exc

    def warm(self) -> None:
        """Build the S3 client now (boto3 takes 0.06–0.6 s of CPU for one, by the machine's
        load), so the first transfer does not wait for it. Then everything alive (boto3's
        service models and clients: hundreds of thousands of objects that live as long as the
        agent) leaves the cyclic collector's care: a full collection walked them all, 0.1 s of
        CPU that fell into a restore about one time in six."""
        self.store.client(self.store.current())
        gc.freeze()

    def _lower_priority(self) -> None:
        """Transfers must not starve training: raise this thread's niceness (Linux: per thread)."""
        if self._nice:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)

    # -- retries ---------------------------------------------------------------------------

    def call(self, what: str, fn: Callable[[Any, Credentials], T]) -> T:
        """Run `fn(client, credentials)` with retries; 401s wait for new credentials, a 403
        AccessDenied raises `AccessDenied` (see the module docstring)."""
        attempt = 0
        renewals = 0  # retries with newer credentials: bounded too, never a blind loop
        while True:
            if self.cancel.is_set():
                raise TransferCancelled(what)
            creds = self.store.current()
            try:
                return fn(self.store.client(creds), creds)
            except ClientError as exc:
                code = error_code(exc)
                if code == "NoSuchUpload":
                    raise UploadLost(what) from exc
                if code in NOT_FOUND:
                    raise
                newer = self.store.current().version > creds.version
                if code in DENIED_ERRORS and not newer and not _expired(creds):
                    if not self._newer_after_doubt(what, creds):
                        denied = AccessDenied(what, creds.bucket, creds.access_key_id)
                        log.error("storage refused %s", denied)
                        raise denied from exc
                    newer = True
                if code in DENIED_ERRORS or code in CREDENTIAL_ERRORS:
                    renewals += 1
                    if renewals > self._max_attempts:
                        raise StorageError(f"{what}: {code} with {renewals} credentials") from exc
                    if newer:
                        continue
                    log.warning(
                        "%s: %s with key %s…; waiting for new credentials",
                        what,
                        code,
                        creds.access_key_id[:4],
                    )
                    if self.store.wait_newer(creds.version, self._credential_wait_s):
                        continue
                error: Exception = exc
            except (BotoCoreError, OSError) as exc:
                error = exc
            attempt += 1
            if attempt >= self._max_attempts:
                raise StorageError(f"{what}: {error}") from error
            delay = min(30.0, self._backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            log.info("%s failed (%s); retry %d in %.1fs", what, error, attempt, delay)
            if self.cancel.wait(delay):
                raise TransferCancelled(what)

    def _newer_after_doubt(self, what: str, creds: Credentials) -> bool:
        """After a 403 on `creds`: wait for newer credentials until `stale_wait_s` after the
        first 403 on this version (concurrent parts share the deadline); True when they came."""
        with self._doubt_lock:
            first = creds.version not in self._doubted_until
            deadline = self._doubted_until.setdefault(
                creds.version, time.monotonic() + self._stale_wait_s
            )
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            return False
        if first:
            log.warning(
                "%s: AccessDenied with key %s…; waiting %.0fs for newer credentials once",
                what,
                creds.access_key_id[:4],
                self._stale_wait_s,
            )
        return self.store.wait_newer(creds.version, left_s) is not None

    # -- listing ---------------------------------------------------------------------------

    def list_checkpoints(self, generation: int) -> list[RemoteCheckpointId]:
        """The checkpoint directories of `generation` (complete or not)."""
        root = checkpoints_prefix(self.prefix, generation)
        found: list[RemoteCheckpointId] = []
        for common in self._list(root, delimiter="/"):
            step = parse_remote_dir(common.removeprefix(root))
            if step is not None:
                found.append(RemoteCheckpointId(step, generation))
        return found

    def list_sizes(self, prefix: str) -> dict[str, int]:
        """Every key under `prefix` with its size."""
        return dict(self._list_objects(prefix))

    def list_keys(self, prefix: str) -> list[str]:
        return list(self._list(prefix, delimiter=None))

    def _list(self, prefix: str, delimiter: str | None) -> Iterator[str]:
        if delimiter is None:
            yield from (key for key, _ in self._list_objects(prefix))
            return
        for page in self._pages(prefix, delimiter):
            yield from (p["Prefix"] for p in page.get("CommonPrefixes", []))

    def _list_objects(self, prefix: str) -> Iterator[tuple[str, int]]:
        for page in self._pages(prefix, None):
            yield from ((o["Key"], int(o.get("Size", 0))) for o in page.get("Contents", []))

    def _pages(self, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:

            def page(client: Any, creds: Credentials, token: str | None = token) -> Any:
                kwargs: dict[str, Any] = {"Bucket": creds.bucket, "Prefix": prefix}
                if delimiter:
                    kwargs["Delimiter"] = delimiter
                if token:
                    kwargs["ContinuationToken"] = token
                return client.list_objects_v2(**kwargs)

            reply: dict[str, Any] = self.call(f"list {prefix}", page)
            yield reply
            token = reply.get("NextContinuationToken")
            if not reply.get("IsTruncated") or not token:
                return

    # -- small objects ---------------------------------------------------------------------

    def get_bytes(self, key: str) -> bytes | None:
        def get(client: Any, creds: Credentials) -> bytes:
            body: bytes = client.get_object(Bucket=creds.bucket, Key=key)["Body"].read()
            return body

        try:
            data = self.call(f"get {key}", get)
        except ClientError as exc:
            if error_code(exc) in NOT_FOUND:
                return None
            raise StorageError(f"get {key}: {exc}") from exc
        self.stats.add(down=len(data))
        return data

    def put_bytes(
        self, key: str, data: bytes, content_type: str = "application/octet-stream"
    ) -> None:
        self.limiter.acquire(len(data))
        self.call(
            f"put {key}",
            lambda client, creds: client.put_object(
                Bucket=creds.bucket, Key=key, Body=data, ContentType=content_type
            ),
        )
        self.stats.add(up=len(data))

    def read_manifest(self, cid: RemoteCheckpointId) -> Manifest | None:
        data = self.get_bytes(cid.manifest_key(self.prefix))
        return Manifest.model_validate_json(data) if data is not None else None

    def put_manifest(self, cid: RemoteCheckpointId, manifest: Manifest) -> tuple[str, str]:
        """Write the manifest (last: now the checkpoint exists); its key and the sha256 of the
        bytes written, which the control plane records and a restore checks."""
        key = cid.manifest_key(self.prefix)
        data = manifest.model_dump_json(indent=1).encode()
        self.put_bytes(key, data, "application/json")
        return key, hashlib.sha256(data).hexdigest()

    def delete_checkpoint(self, cid: RemoteCheckpointId, keys: Iterable[str] | None = None) -> None:
        """Manifest first: a half-deleted checkpoint must already count as nonexistent. `keys`:
        every key the directory may hold, when the caller knows them (no listing then)."""
        manifest_key = cid.manifest_key(self.prefix)
        self._delete([manifest_key])
        rest = self.list_keys(cid.dir_key(self.prefix)) if keys is None else sorted(keys)
        self._delete([k for k in rest if k != manifest_key])

    def _delete(self, keys: list[str]) -> None:
        if not keys:
            return
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]

            def delete(client: Any, creds: Credentials, batch: list[dict[str, str]] = batch) -> Any:
                return client.delete_objects(
                    Bucket=creds.bucket, Delete={"Objects": batch, "Quiet": True}
                )

            self.call("delete", delete)

    # -- upload ----------------------------------------------------------------------------

    def upload_file(self, path: Path, key: str) -> tuple[int, str]:
        """Upload one file; returns (size, sha256 hex) computed from the bytes that were sent."""
        for restart in range(3):
            try:
                return self._upload_once(path, key)
            except UploadLost:
                log.warning(
                    "upload of %s lost by the server; starting it again (%d)", key, restart + 1
                )
        raise StorageError(f"upload of {key} lost three times")

    def _upload_once(self, path: Path, key: str) -> tuple[int, str]:
        size = path.stat().st_size
        part_size = part_size_for(size, self.part_size)
        sha = hashlib.sha256()
        if size <= part_size:
            data = path.read_bytes()
            sha.update(data)
            self.put_bytes(key, data)
            return len(data), sha.hexdigest()

        upload_id: str = self.call(
            f"create {key}",
            lambda client, creds: client.create_multipart_upload(Bucket=creds.bucket, Key=key)[
                "UploadId"
            ],
        )
        parts: list[Future[dict[str, Any]]] = []
        sent = 0
        try:
            with path.open("rb") as f:
                number = 0
                while True:
                    self._window.acquire()
                    try:
                        chunk = f.read(part_size)
                    except BaseException:
                        self._window.release()
                        raise
                    if not chunk:
                        self._window.release()
                        break
                    sha.update(chunk)
                    sent += len(chunk)
                    number += 1
                    parts.append(self._submit(self._upload_part, key, upload_id, number, chunk))
                    if any(p.done() and p.exception() for p in parts):
                        break  # fail fast; result() below raises it
            etags = [p.result() for p in parts]
            if sent != size:
                raise StorageError(f"{path} changed size while uploading")
            self.call(
                f"complete {key}",
                lambda client, creds: client.complete_multipart_upload(
                    Bucket=creds.bucket, Key=key, UploadId=upload_id,
                    MultipartUpload={"Parts": etags},
                ),
            )  # fmt: skip
        except BaseException:
            for p in parts:
                if p.cancel():  # never ran, so never released its window slot
                    self._window.release()
            wait(parts)
            self._abort(key, upload_id)
            raise
        return size, sha.hexdigest()

    def _upload_part(self, key: str, upload_id: str, number: int, chunk: bytes) -> dict[str, Any]:
        try:
            self.limiter.acquire(len(chunk))
            reply = self.call(
                f"part {number} of {key}",
                lambda client, creds: client.upload_part(
                    Bucket=creds.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk
                ),
            )
            self.stats.add(up=len(chunk))
            return {"PartNumber": number, "ETag": reply["ETag"]}
        finally:
            self._window.release()

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._abort(key, upload_id)

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            creds = self.store.current()
            self.store.client(creds).abort_multipart_upload(
                Bucket=creds.bucket, Key=key, UploadId=upload_id
            )
        except (ClientError, BotoCoreError, OSError) as exc:
            log.info("abort of %s: %s (the server expires it)", key, exc)

    # -- download --------------------------------------------------------------------------

    def download_file(self, key: str, dest: Path, size: int) -> str:
        """Download `key` to `dest` in parallel ranged GETs; returns the sha256 of the file as
        written, hashed in file order as the bytes land (`ranged_download`)."""
        ranges = self.spans(size)
        landing = Landing(len(ranges))
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            return fetch_and_hash(
                fd,
                ranges,
                landing,
                lambda i, span: self._submit(self._fetch_range, key, fd, span, i, landing),
            )
        finally:
            os.close(fd)  # every range has stopped (`fetch_and_hash`)

    def range_for(self, size: int) -> int:
        """The ranged GET size for a file of `size` bytes: about a quarter of it, within
        [`min_download_range`, `download_range`]."""
        quarter = -(-size // 4 // MIB) * MIB
        return min(self.download_range, max(self.min_download_range, quarter))

    def spans(self, size: int) -> list[tuple[int, int]]:
        return spans(size, part_size_for(size, self.range_for(size)))

    def _fetch_range(
        self, key: str, fd: int, span: tuple[int, int], index: int, landing: Landing
    ) -> None:
        """Bytes [start, end) of `key` into `fd`, with retries. A retry asks only for what
        has not landed yet: no byte is written twice, so the file's hash covers exactly what
        is on disk."""
        buf = thread_buffer()

        def get(client: Any, creds: Credentials) -> None:
            offset = span[0] + landing.landed(index)
            problem = get_range(
                client, creds.bucket, key, span, offset, fd, buf, landed, check,
                self.stats.add_read_path,
            )  # fmt: skip
            if problem:
                raise IntegrityError(f"{key}: {problem}")

        def landed(n: int) -> None:
            landing.add(index, n)
            self.stats.add(down=n)

        def check() -> None:
            if self.cancel.is_set():
                raise TransferCancelled(key)
            if landing.error is not None:
                raise RangeStopped(key)

        try:
            self.call(f"get {key} [{span[0]}-{span[1] - 1}]", get)
        except ClientError as exc:
            error: BaseException = (
                IntegrityError(f"{key}: missing")
                if error_code(exc) in NOT_FOUND
                else StorageError(f"get {key}: {error_code(exc)}")
            )
            landing.fail(error)
            raise error from exc
        except BaseException as exc:
            landing.fail(exc)
            raise
