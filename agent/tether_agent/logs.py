"""The training log, shipped to the bucket in segments so `tether logs` works from anywhere.

Layout (the API lists it; `functions/api/logs_service.py` parses the same keys), under the
generation's own prefix, the only one its key may write:

    jobs/<job_id>/g<generation>/logs/<sequence, 6 digits>.log

The API names a segment `g<generation, 4 digits>-<sequence, 6 digits>.log`, names that sort in
the order they were written, across host replacements too: a newer generation's segments come
after every segment of the one it replaced. Each segment is written once and never changed (R2
takes about one write per second per key), at most `segment_bytes` long, cut at a line break
where there is one.

Bounded: the shipper holds at most `max_buffer_bytes` in memory (when uploads fail, the oldest
bytes are dropped and a notice says how many) and uploads at most `max_total_bytes` per
generation. A segment the storage refuses as out of scope (403 `AccessDenied`) ends shipping for
this generation, said once in the agent's log: the same credentials would be refused again, and
the full log stays on the host. No secrets: every line is scrubbed of the agent's own secrets
(agent token, storage keys, the container's Vast key) before it is buffered.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from tether_agent.runner import LogSink
from tether_agent.storage import AccessDenied, StorageError, TransferCancelled

log = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * KIB
REDACTED = b"[redacted]"
# Shorter values could match ordinary text; real tokens and keys are far longer.
MIN_SECRET_LENGTH = 8


class SegmentWriter(Protocol):
    """What the shipper needs from `Storage`."""

    prefix: str

    def put_bytes(self, key: str, data: bytes, content_type: str = ...) -> None: ...


def logs_prefix(job_prefix: str, generation: int) -> str:
    return f"{job_prefix}g{generation}/logs/"


def segment_key(job_prefix: str, generation: int, sequence: int) -> str:
    return f"{logs_prefix(job_prefix, generation)}{sequence:06d}.log"


class LogShipper:
    """Buffers the training output (`write`, from the output pump) and uploads it from its own
    thread: a full segment at once, a partial one every `interval_s`, the rest on `close`."""

    def __init__(
        self,
        storage: SegmentWriter,
        generation: int,
        *,
        secrets: Callable[[], Iterable[str]] = tuple,
        segment_bytes: int = 1 * MIB,
        interval_s: float = 30.0,
        max_buffer_bytes: int = 8 * MIB,
        max_total_bytes: int = 256 * MIB,
    ) -> None:
        if segment_bytes < 1 or max_buffer_bytes < segment_bytes or max_total_bytes < 1:
            raise ValueError("need 1 ≤ segment_bytes ≤ max_buffer_bytes and max_total_bytes ≥ 1")
        self._storage = storage
        self._generation = generation
        self._secrets = secrets
        self._segment_bytes = segment_bytes
        self._interval_s = interval_s
        self._max_buffer = max_buffer_bytes
        self._max_total = max_total_bytes
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._upload_lock = threading.Lock()  # one uploader at a time keeps segments ordered
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sequence = 0
        self.uploaded_bytes = 0
        self.dropped_bytes = 0
        self._capped = False
        self._cancelled = False
        self.refused: str | None = None  # why the storage refused the log (AccessDenied)

    # -- input (the training output pump) ------------------------------------------------------

    def write(self, data: bytes) -> None:
        data = scrub(data, self._secrets())
        with self._lock:
            if self._capped or self._cancelled:
                return
            self._buffer += data
            overflow = len(self._buffer) - self._max_buffer
            if overflow > 0:  # uploads are failing: keep the newest output
                del self._buffer[:overflow]
                self.dropped_bytes += overflow
            full = len(self._buffer) >= self._segment_bytes
        if full:
            self._wake.set()

    def note(self, message: str) -> None:
        """A line from tether itself, marked so it stands out from the training output."""
        self.write(f"[tether] {message}\n".encode())

    # -- the upload thread -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            # A wake-up means a full segment is waiting; a timeout ships whatever there is.
            self.flush(partial=not woke)

    def close(self, *, upload_rest: bool = True) -> None:
        """Stop the thread and, unless told otherwise (superseded), upload what is left."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if upload_rest:
            self.flush(partial=True)

    def flush(self, *, partial: bool) -> int:
        """Upload every full segment, and a partial one too if `partial`. Returns the number of
        segments uploaded; bytes that fail to upload stay buffered for the next try."""
        uploaded = 0
        with self._upload_lock:
            while True:
                segment = self._next_segment(partial)
                if segment is None:
                    return uploaded
                key = segment_key(self._storage.prefix, self._generation, self.sequence)
                try:
                    self._storage.put_bytes(key, segment, "text/plain; charset=utf-8")
                except TransferCancelled:
                    with self._lock:
                        self._cancelled = True
                        self._buffer.clear()
                    return uploaded
                except AccessDenied as exc:
                    log.error("log shipping stopped; the full log stays on the host: %s", exc)
                    with self._lock:
                        self.refused = str(exc)
                        self._cancelled = True
                        self._buffer.clear()
                    return uploaded
                except StorageError as exc:
                    log.warning("log segment %s not uploaded (will retry): %s", key, exc)
                    with self._lock:  # put it back in front of what came since
                        self._buffer[:0] = segment
                    return uploaded
                self.sequence += 1
                self.uploaded_bytes += len(segment)
                uploaded += 1

    def _next_segment(self, partial: bool) -> bytes | None:
        with self._lock:
            if self._capped or self._cancelled or not self._buffer:
                return None
            if len(self._buffer) < self._segment_bytes and not partial:
                return None
            size = cut_point(self._buffer, self._segment_bytes)
            notice = b""
            if self.dropped_bytes:
                notice = f"[tether] {self.dropped_bytes} bytes of log dropped\n".encode()
                self.dropped_bytes = 0
            left = self._max_total - self.uploaded_bytes
            if len(notice) + size >= left:
                # The last segment this generation writes says why the log stops here.
                self._capped = True
                stop = b"[tether] log upload cap reached; the full log stays on the host\n"
                size = max(0, min(size, left - len(notice) - len(stop)))
                segment = notice + bytes(self._buffer[:size]) + stop
                self._buffer.clear()
                return segment
            segment = notice + bytes(self._buffer[:size])
            del self._buffer[:size]
            return segment


def cut_point(buffer: bytes | bytearray, limit: int) -> int:
    """How many bytes of `buffer` go into the next segment: everything if it fits, else up to
    the last line break within `limit` (or exactly `limit` for a line longer than that)."""
    if len(buffer) <= limit:
        return len(buffer)
    newline = buffer.rfind(b"\n", 0, limit)
    return newline + 1 if newline >= 0 else limit


def scrub(data: bytes, secrets: Iterable[str]) -> bytes:
    """`data` with every occurrence of a secret replaced by `[redacted]`."""
    for secret in secrets:
        if len(secret) >= MIN_SECRET_LENGTH:
            data = data.replace(secret.encode(), REDACTED)
    return data


class OutputTail:
    """The last `max_lines` lines of the training output (a log sink, fed line by line by the
    output pump), each scrubbed of the agent's secrets as it comes, like the shipped log: what
    the heartbeat says after a non-zero exit (`text`). stdout and stderr come through one pipe
    in the order the command wrote them, so a traceback is the tail's last lines."""

    def __init__(
        self, max_lines: int, max_chars: int, *, secrets: Callable[[], Iterable[str]] = tuple
    ) -> None:
        self._max_chars = max_chars
        self._secrets = secrets
        self._lines: deque[bytes] = deque(maxlen=max_lines)
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        # Scrubbed whole, then a line longer than the tail keeps only its end.
        line = scrub(data, self._secrets())[-4 * self._max_chars :]
        with self._lock:
            self._lines.append(line)

    def text(self) -> str | None:
        """The tail as text (undecodable bytes replaced, control characters kept as they are),
        at most `max_chars` characters, cut at a line start where one fits; None when the
        command wrote nothing but blanks."""
        with self._lock:
            raw = b"".join(self._lines)
        text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            return None
        if len(text) > self._max_chars:
            text = text[-self._max_chars :]
            line_start = text.find("\n") + 1
            if 0 < line_start < len(text):
                text = text[line_start:]
        return text


class TeeLog:
    """A log sink that writes to several sinks (the local rotating log and the shipper)."""

    def __init__(self, *sinks: LogSink) -> None:
        self._sinks = sinks

    def write(self, data: bytes) -> None:
        for sink in self._sinks:
            try:
                sink.write(data)
            except Exception:  # a broken sink must never stop the training output
                log.exception("log sink %r failed", sink)
