"""The R2 front: a loopback HTTP server in front of `rclone serve s3` that answers as R2 does.

Every request is judged when it arrives, against the key as the Cloudflare simulator holds it at
that moment (`lookup`, e.g. `CloudflareSim.live_key`): nothing is cached, so a key is refused the
instant it expires or its parent is revoked. The front verifies the SigV4 signature itself
(header or presigned query, `tether_local.r2.auth`), then the session token, the bucket, the
object key (or listing prefix, or every key of a `DeleteObjects`, or a copy's source) against the
key's `prefixes`/`objects`, and the permission; a refusal is R2's S3 error XML, with the codes and
statuses of Cloudflare's R2 error table (`tether_local.r2.auth` says which and why). At
`CompleteMultipartUpload` it also applies R2's part rules, which rclone does not: every part but
the last at least 5 MiB (`EntityTooSmall`) and all of the same size (`InvalidPart`). An allowed
request that uses a feature R2 does not take (request checksums and aws-chunked trailers on
uploads, ACLs, tagging, object lock) is refused as R2 refuses it (`tether_local.r2.features`).

Why the front verifies the signature rather than leaving it to rclone (with an auth proxy
handing rclone each key's secret): rclone answers a bad signature before reading the body and
then closes the connection, so a large upload signed wrongly would reach the client as a reset
instead of R2's 403; rclone makes each access key a separate user whose multipart uploads are
private to it, whereas R2's belong to the bucket (a key rotated mid-upload may finish it); and
a per-key auth subprocess with a five-minute answer cache is one more thing that can be stale.
So rclone serves the data anonymously on a loopback port that only the front is told about, and
the request is relayed to it unchanged (method, target, headers including `Host`, body), except
`Expect: 100-continue`, which the front answers itself once the request is allowed. A body
without a `Content-Length` (chunked) gets R2's 411 `MissingContentLength`, as rclone would.

Transfers stream both ways in 1 MiB pieces over HTTP/1.1 keep-alive connections (one upstream
connection per client connection), so a checkpoint of hundreds of MB never sits in memory.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from tether_local.r2.auth import (
    ENTITY_TOO_LARGE,
    MALFORMED_XML,
    MISSING_CONTENT_LENGTH,
    SERVICE_UNAVAILABLE,
    KeyLookup,
    Operation,
    Refusal,
    Request,
    Scope,
    authenticate,
    authorize,
    check_part_sizes,
    classify,
    error_xml,
)
from tether_local.r2.features import unsupported_feature

LOG = logging.getLogger(__name__)

BUFFER_BYTES = 1024 * 1024
MAX_JUDGED_BODY_BYTES = 16 * 1024 * 1024  # DeleteObjects (≤ 1000 keys), Complete (≤ 10,000 parts)
# Refused bodies up to this size are read and dropped so the connection stays usable; a larger
# one (or one the client holds back behind `Expect: 100-continue`) closes the connection.
MAX_DRAIN_BYTES = 64 * 1024 * 1024
REUSE_IDLE_S = 30.0  # an upstream connection idle longer is not trusted with a streamed body
_NO_BODY_STATUSES = frozenset({204, 304})
_NOT_RELAYED = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection"})


class _ClientGone(Exception):
    """The client stopped sending the body it announced (not an upstream failure)."""


class _Upstream:
    """One keep-alive connection to rclone, owned by one client connection's thread."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self.conn: http.client.HTTPConnection | None = None
        self.last_used = 0.0

    def connection(self, *, fresh: bool) -> http.client.HTTPConnection:
        stale = time.monotonic() - self.last_used > REUSE_IDLE_S
        if self.conn is not None and (fresh and stale):
            self.close()
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self._host, self._port, timeout=300)
            self.conn.connect()
            assert self.conn.sock is not None
            self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# What a socket raises when the client has hung up (reset, or closed before the answer).
CLIENT_GONE = (BrokenPipeError, ConnectionResetError)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up before its request line is read (a host killed between two
        requests on a kept-alive connection) is not a server error: no traceback for it;
        any other error keeps socketserver's."""
        gone = sys.exc_info()[1]
        if isinstance(gone, CLIENT_GONE):
            LOG.debug("r2 front: client %s hung up: %s", client_address, gone)
            return
        super().handle_error(request, client_address)

    def __init__(self, address: tuple[str, int], front: R2Front) -> None:
        self.front = front
        self.open_sockets: set[socket.socket] = set()
        self.sockets_lock = threading.Lock()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    rbufsize = 256 * 1024
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.sockets_lock:
            self.server.open_sockets.add(self.connection)
        front = self.server.front
        self.upstream = _Upstream(front.upstream_host, front.upstream_port)
        self.buffer = memoryview(bytearray(BUFFER_BYTES))

    def finish(self) -> None:
        self.upstream.close()
        with self.server.sockets_lock:
            self.server.open_sockets.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("r2 front: " + format, *args)

    def handle_expect_100(self) -> bool:
        return True  # answered in `_serve`, once the request is allowed

    # -- one request ----------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            self._serve_one()
        except (_ClientGone, OSError, http.client.HTTPException, ValueError) as exc:
            # The client went away mid-request (a host destroyed mid-upload), or the stack is
            # stopping: nothing to answer, and this connection is done.
            LOG.debug("r2 front: %s %s ended: %s", self.command, self.path, exc)
            self.upstream.close()
            self.close_connection = True

    def _serve_one(self) -> None:
        front = self.server.front
        raw_path, _, raw_query = self.path.partition("?")
        request = Request(self.command, raw_path, raw_query, list(self.headers.items()))
        self.expects_continue = (self.headers.get("Expect") or "").lower() == "100-continue"
        self.continued = False
        self.chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        try:
            self.length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.length = -1
        if self.length < 0:  # where the body ends is unknown: answer and close
            self.close_connection = True
            self._refuse(MISSING_CONTENT_LENGTH, drain=False)
            return
        if self.chunked:  # R2 (and rclone) want the length up front
            self._refuse(MISSING_CONTENT_LENGTH)
            return
        key = authenticate(request, front.lookup, front.clock())
        if isinstance(key, Refusal):
            self._refuse(key)
            return
        query = dict(request.query())
        op = classify(self.command, raw_path, query, self.headers.get("x-amz-copy-source"))
        refusal = authorize(key.scope, op) or unsupported_feature(op.name, request.headers, query)
        body: bytes | None = None
        if refusal is None and op.needs_body:
            body = self._read_judged_body()
            if body is None:
                return
            refusal = self._judge_body(key.scope, op, body)
        if refusal is not None:
            self._refuse(refusal, drain=body is None)
            return
        self._relay(op, body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve

    def _judge_body(self, scope: Scope, op: Operation, body: bytes) -> Refusal | None:
        try:
            root = ET.fromstring(body)  # noqa: S314 - loopback, from the stack's own clients
        except ET.ParseError:
            # Which keys a DeleteObjects names cannot be told: refused. A Complete's part list
            # is only needed for the part rules: rclone answers it as it is.
            return MALFORMED_XML if op.name == "DeleteObjects" else None
        if op.name == "DeleteObjects":
            keys = [el.text or "" for el in root.iter() if _local(el.tag) == "Key"]
            return authorize(scope, op, keys)
        texts = [(el.text or "").strip() for el in root.iter() if _local(el.tag) == "PartNumber"]
        numbers = [int(text) for text in texts if text.isdigit()]
        sizes = self.server.front.part_sizes(op.upload_id or "", numbers)
        return check_part_sizes(sizes) if sizes is not None else None

    # -- bodies ---------------------------------------------------------------------------------

    def _continue(self) -> None:
        if self.expects_continue and not self.continued:
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.continued = True

    def _read_judged_body(self) -> bytes | None:
        if self.length > MAX_JUDGED_BODY_BYTES:
            self._refuse(ENTITY_TOO_LARGE.because("This request's body is at most 16 MiB here."))
            return None
        self._continue()
        return self.rfile.read(self.length)

    def _refuse(self, refusal: Refusal, *, drain: bool = True) -> None:
        has_body = self.chunked or self.length > 0
        if has_body and drain:
            if self.expects_continue or self.chunked or self.length > MAX_DRAIN_BYTES:
                self.close_connection = True  # the client may hold the body back: don't read it
            else:
                _drain(self.rfile, self.length, self.buffer)
        path = self.path.split("?", 1)[0]
        LOG.info(
            "r2 front: %s %s refused: %s %s (%s)",
            self.command,
            path,
            refusal.status,
            refusal.code,
            refusal.message,
        )
        self.server.front.refusals.append(Refused(self.command, path, refusal.status, refusal.code))
        body = b"" if self.command == "HEAD" else error_xml(refusal, path)
        head = [
            f"HTTP/1.1 {refusal.status} {_reason(refusal.status)}",
            "Content-Type: application/xml",
            f"Content-Length: {len(body)}",
        ]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    # -- relaying -------------------------------------------------------------------------------

    def _relay(self, op: Operation, body: bytes | None) -> None:
        streamed = body is None and self.length > 0
        response: http.client.HTTPResponse | None = None
        for attempt in (1, 2):
            try:
                conn = self.upstream.connection(fresh=streamed)
                self._send_request(conn, body, streamed)
                response = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as exc:
                self.upstream.close()
                # Only a keep-alive connection rclone had already closed is tried again (it
                # did not run the request); anything else may have run it once already.
                if streamed or attempt == 2 or not isinstance(exc, ConnectionError):
                    LOG.warning("r2 front: upstream failed for %s %s: %s", op.name, self.path, exc)
                    self.close_connection = True
                    self._refuse(
                        SERVICE_UNAVAILABLE,
                        drain=False,
                    )
                    return
        assert response is not None
        try:
            self._send_response(response)
        except (OSError, http.client.HTTPException) as exc:
            LOG.info("r2 front: relay of %s %s cut: %s", op.name, self.path, exc)
            self.upstream.close()
            self.close_connection = True
            return
        finally:
            self.upstream.last_used = time.monotonic()
        if 200 <= response.status < 300:
            self.server.front.observe(op, self._part_size())

    def _send_request(
        self, conn: http.client.HTTPConnection, body: bytes | None, streamed: bool
    ) -> None:
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            lowered = name.lower()
            if lowered == "expect" or (body is not None and lowered == "content-length"):
                continue
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body:
            conn.send(body)
        elif streamed:
            self._continue()
            _copy(self.rfile, conn, self.length, self.buffer)

    def _send_response(self, response: http.client.HTTPResponse) -> None:
        no_body = (
            self.command == "HEAD"
            or response.status in _NO_BODY_STATUSES
            or 100 <= response.status < 200
        )
        chunked = bool(response.chunked) and not no_body
        until_close = not no_body and not chunked and response.length is None
        head = [f"HTTP/1.1 {response.status} {response.reason}"]
        head += [f"{k}: {v}" for k, v in response.getheaders() if k.lower() not in _NOT_RELAYED]
        if chunked:
            head.append("Transfer-Encoding: chunked")
        if until_close or self.close_connection:
            self.close_connection = True
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if no_body:
            # Read to its (empty) end so http.client lets the next request use the connection.
            response.read()
            return
        buffer = self.buffer
        while True:
            n = response.readinto(buffer)
            if not n:
                break
            if chunked:
                self.wfile.write(b"%x\r\n" % n)
                self.wfile.write(buffer[:n])
                self.wfile.write(b"\r\n")
            else:
                self.wfile.write(buffer[:n])
        if chunked:
            self.wfile.write(b"0\r\n\r\n")

    def _part_size(self) -> int:
        decoded = self.headers.get("x-amz-decoded-content-length")
        return int(decoded) if decoded and decoded.isdigit() else self.length


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _reason(status: int) -> str:
    reasons = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 411: "Length Required"}
    return {**reasons, 501: "Not Implemented"}.get(status, "Service Unavailable")


def _copy(source: Any, conn: http.client.HTTPConnection, length: int, buffer: memoryview) -> None:
    left = length
    while left:
        try:
            n = source.readinto(buffer[: min(left, len(buffer))])
        except OSError as exc:
            raise _ClientGone(f"client sent {length - left} of {length} body bytes") from exc
        if not n:
            raise _ClientGone(f"client sent {length - left} of {length} body bytes")
        conn.send(buffer[:n])
        left -= n


def _drain(source: Any, length: int, buffer: memoryview) -> None:
    left = length
    while left:
        n = source.readinto(buffer[: min(left, len(buffer))])
        if not n:
            return
        left -= n


@dataclass(frozen=True)
class Refused:
    """One request the front answered with an error itself (what tests count)."""

    method: str
    path: str
    status: int
    code: str


class R2Front:
    """The front; a context manager. `url` is what every S3 client of the local stack uses;
    `refusals` holds the latest requests it refused (oldest dropped past 10,000)."""

    def __init__(
        self,
        upstream_url: str,
        lookup: KeyLookup,
        *,
        port: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = urlsplit(upstream_url)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.lookup = lookup
        self.clock = clock
        self._server = _Server(("127.0.0.1", port), self)
        self._thread: threading.Thread | None = None
        self._parts: dict[str, dict[int, int]] = {}  # upload id → part number → bytes
        self._parts_lock = threading.Lock()
        self.refusals: deque[Refused] = deque(maxlen=10_000)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> R2Front:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="r2-front",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        with self._server.sockets_lock:
            open_sockets = list(self._server.open_sockets)
        for sock in open_sockets:  # idle keep-alive connections: end their threads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._server.server_close()

    def __enter__(self) -> R2Front:
        return self.start() if self._thread is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- multipart bookkeeping (R2's part rules) ---------------------------------------------------

    def observe(self, op: Operation, part_bytes: int) -> None:
        """Remember what rclone accepted that a later CompleteMultipartUpload is judged by."""
        if op.upload_id is None:
            return
        with self._parts_lock:
            if op.name == "UploadPart" and op.part_number is not None:
                self._parts.setdefault(op.upload_id, {})[op.part_number] = part_bytes
            elif op.name in ("CompleteMultipartUpload", "AbortMultipartUpload"):
                self._parts.pop(op.upload_id, None)

    def part_sizes(self, upload_id: str, numbers: list[int]) -> list[int] | None:
        """The sizes of the parts a Complete names, in its order; None if one was not seen
        through this front (then rclone's own answer stands)."""
        with self._parts_lock:
            known = self._parts.get(upload_id, {})
            if not numbers or any(n not in known for n in numbers):
                return None
            return [known[n] for n in numbers]


__all__ = ["R2Front", "Refused"]
