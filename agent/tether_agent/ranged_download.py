"""The parts of a ranged download that run per byte: each range streams from its HTTP body
through one reused buffer straight into the file, and the file's sha256 is computed in file
order from the file itself as its bytes land, while the later ranges still download.

Why so (a 128 MiB restore cost 2.5 CPU-s/GiB against s5cmd's 0.7; then 1.4, of which the sha256
is 0.54 and reading the bytes back for it about 0.1; BENCHMARKS.md): reading a range as one
`bytes` object takes fresh memory for every range, and fresh memory costs about 0.9 CPU-s/GiB in
page faults on these VMs (a copy into a reused buffer: 0.07); and a range held in memory was
hashed only once all of it had arrived. Hashing the file after its bytes were written also
means the digest covers exactly what is on disk: a retry resumes a range where it stopped, so
no byte is written twice. The bytes go to the file in writes of at most `WRITE_SLICE` (32 KiB,
the size s5cmd writes in): on the development VM a larger write takes page-cache pages that often
cost the kernel several times the CPU to fill (a 128 MiB restore in 64 KiB writes: 1.9–4.6
CPU-s/GiB of system time; in 32 KiB writes 0.5–2.3; BENCHMARKS.md).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, wait
from typing import Any

from botocore.exceptions import IncompleteReadError

from tether_agent.checkpoints import MIB

CHUNK = MIB  # the reused buffer of each range thread, and of each file's hasher
# The most one pwrite hands the page cache. Linux fills a buffered write into page-cache folios
# sized by the write; 32 KiB (order 3) is the largest the page allocator serves from its per-CPU
# lists of recently freed pages. Larger ones are cut from the free lists' large blocks, which on
# the development VM (a Firecracker guest whose balloon reports free memory to the host) the
# host probably has to fault back in on first touch: `perf` puts the time in the kernel's copy
# into the new pages (`copy_folio_from_iter_atomic`). Writing 128 MiB to a new file, 8 rounds
# each, system CPU-s/GiB: 32 KiB writes 0.24–0.40, 64 KiB 1.15–1.88, 1 MiB about 3
# (BENCHMARKS.md). s5cmd writes in 32 KiB (Go's `io.Copy` buffer). The extra system calls (32 a
# MiB) cost nothing measurable.
WRITE_SLICE = 32 * 1024
# How a range's body reaches the buffer (`body_reader`), as `TransferStats.read_paths` counts it.
READ_PATH_DIRECT = "socket readinto"
READ_PATH_COPY = "read copy"
_buffers = threading.local()


def thread_buffer() -> bytearray:
    """This thread's chunk buffer, made once: fresh memory per range costs page faults."""
    buf: bytearray | None = getattr(_buffers, "buf", None)
    if buf is None:
        buf = _buffers.buf = bytearray(CHUNK)
    return buf


def spans(size: int, part: int) -> list[tuple[int, int]]:
    """The ranges [start, end) of a file of `size` bytes in file order, `part` bytes each. An
    empty file is one GET all the same (is it there?). (Ranges growing from a small first one,
    so that they land in order for the hash, cost more requests and gained nothing measurable
    at 128 MiB or 1 GiB.)"""
    return [(start, min(size, start + part)) for start in range(0, size, part)] or [(0, 0)]


class RangeStopped(Exception):
    """Another range of the file failed (or its hashing did): this one stops too."""


class Landing:
    """How many bytes of each range of one file are in the file, for the hasher that waits on
    them; the first failure of any range wakes it too."""

    def __init__(self, ranges: int) -> None:
        self._cond = threading.Condition()
        self._landed = [0] * ranges
        self.error: BaseException | None = None

    def landed(self, index: int) -> int:
        with self._cond:
            return self._landed[index]

    def add(self, index: int, nbytes: int) -> None:
        with self._cond:
            self._landed[index] += nbytes
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self._cond:
            if self.error is None:
                self.error = exc
            self._cond.notify_all()

    def dropped(self, part: Future[None]) -> None:
        """A range the pool dropped (`Storage.close`) never lands: do not wait on it."""
        if part.cancelled():
            self.fail(CancelledError())

    def wait_beyond(self, index: int, have: int) -> int:
        """Block until range `index` has more than `have` bytes in the file; raise the first
        failure instead."""
        with self._cond:
            self._cond.wait_for(lambda: self._landed[index] > have or self.error is not None)
            if self.error is not None:
                raise self.error
            return self._landed[index]


def body_reader(body: Any) -> tuple[str, Callable[[memoryview], int]]:
    """`readinto` for a botocore streaming body, and which read path it is. The http.client
    response under urllib3 reads from the socket straight into the caller's buffer
    (`READ_PATH_DIRECT`); urllib3's own `readinto` (and `read(amt)`) build new `bytes` for every
    call and copy them. Any other body (a stub in tests, another HTTP stack) is read with
    `read(amt)` (`READ_PATH_COPY`)."""
    fp = getattr(getattr(body, "_raw_stream", None), "_fp", None)
    readinto = getattr(fp, "readinto", None)
    if callable(readinto):
        return READ_PATH_DIRECT, readinto

    def read_copy(view: memoryview) -> int:
        data: bytes = body.read(len(view))
        view[: len(data)] = data
        return len(data)

    return READ_PATH_COPY, read_copy


def write_at(fd: int, data: memoryview, offset: int) -> None:
    """All of `data` into `fd` at `offset`, in writes of at most `WRITE_SLICE` bytes."""
    written = 0
    while written < len(data):  # pwrite to a regular file may in principle write less
        piece = data[written : written + WRITE_SLICE]
        written += os.pwrite(fd, piece, offset + written)


def release(body: Any) -> None:
    """Hand the connection back to the pool once its body is read to the end (urllib3 does it
    itself only when it reads the body; `body_reader` went around it). Otherwise close it: a
    connection in the middle of a body cannot serve another request."""
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    release_conn = getattr(raw, "release_conn", None)
    if fp is not None and callable(release_conn) and fp.isclosed():
        release_conn()
    else:
        body.close()


def stream_body(
    body: Any,
    fd: int,
    offset: int,
    length: int,
    buf: bytearray,
    landed: Callable[[int], None],
    check: Callable[[], None],
) -> str:
    """Write `length` bytes of `body` to `fd` from `offset`, through `buf`; `landed(n)` after
    each write, `check()` before each read (it raises to stop the range). Returns the read path
    it took (`body_reader`). A body that ends early raises `IncompleteReadError`: a network
    failure, the caller retries from what landed."""
    read_path, readinto = body_reader(body)
    view = memoryview(buf)
    left = length
    try:
        while left:
            check()
            n = readinto(view[: min(left, len(view))])
            if not n:
                raise IncompleteReadError(actual_bytes=length - left, expected_bytes=length)
            write_at(fd, view[:n], offset)
            offset += n
            left -= n
            landed(n)
    except BaseException:
        body.close()  # mid-body: the connection cannot be reused
        raise
    release(body)
    return read_path


def get_range(
    client: Any,
    bucket: str,
    key: str,
    span: tuple[int, int],
    offset: int,
    fd: int,
    buf: bytearray,
    landed: Callable[[int], None],
    check: Callable[[], None],
    read_path: Callable[[str], None] = lambda path: None,
) -> str | None:
    """GET what is left of `span` from `offset` (an empty span: the whole, empty, object) and
    stream it into `fd` (`read_path(path)` once it has, with the read path it took); why the
    reply cannot be used, if it cannot."""
    start, end = span
    kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if end > start:
        if offset == end:
            return None  # all of it landed before the attempt failed
        kwargs["Range"] = f"bytes={offset}-{end - 1}"
    reply = client.get_object(**kwargs)
    body = reply["Body"]
    if reply.get("ContentLength") != end - offset:
        body.close()
        return f"{reply.get('ContentLength')} bytes at {offset}, expected {end - offset}"
    read_path(stream_body(body, fd, offset, end - offset, buf, landed, check))
    return None


def fetch_and_hash(
    fd: int,
    ranges: list[tuple[int, int]],
    landing: Landing,
    submit: Callable[[int, tuple[int, int]], Future[None]],
) -> str:
    """Start every range (`submit(index, span)`; the pool's threads bound how many run at
    once), hash the file as they land, and return its sha256 once all have landed. On any
    failure the ranges still running stop at their next chunk, and all have stopped when
    this returns or raises: none may write to `fd` after it is closed."""
    parts: list[Future[None]] = []
    try:
        parts = [submit(index, span) for index, span in enumerate(ranges)]
        for part in parts:
            part.add_done_callback(landing.dropped)
        digest = hash_as_landed(fd, ranges, landing)
        for part in parts:
            part.result()
        return digest
    except BaseException as exc:
        landing.fail(exc)
        for part in parts:
            part.cancel()
        raise
    finally:
        # A cancelled range never runs; and `wait` would hang on one the pool dropped.
        wait([part for part in parts if not part.cancelled()])


def hash_as_landed(fd: int, ranges: list[tuple[int, int]], landing: Landing) -> str:
    """The sha256 of the file, read back in order from `fd` as each range's bytes land
    (`ranges`: [start, end) in file order). The bytes are hot in the page cache; reading them
    into one reused buffer costs far less than keeping them in memory until their turn."""
    sha = hashlib.sha256()
    view = memoryview(bytearray(CHUNK))
    for index, (start, end) in enumerate(ranges):
        done = 0
        while start + done < end:
            have = landing.wait_beyond(index, done)
            while done < have:
                n = os.preadv(fd, [view[: min(len(view), have - done)]], start + done)
                if not n:
                    raise OSError(f"the file ended at {start + done} while hashing")
                sha.update(view[:n])  # hashlib releases the GIL for large updates
                done += n
    return sha.hexdigest()
