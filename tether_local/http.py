"""Loopback HTTP servers for the local stack: the simulators and the API front.

`LoopbackServer(handler)` serves any `httpx.Request -> httpx.Response` function on
`127.0.0.1:<port>` (the Vast and Cloudflare simulators' `handle`). A handler that raises
`httpx.TransportError` or `DropConnection` gets its connection closed without an answer, which is
what a client sees when a host's network is cut.

A client that hangs up mid-request or mid-response (a host destroyed while it talks, a CLI
interrupted, `curl … | head`) ends its connection quietly (`CLIENT_GONE`, logged at debug): it
is not a server error worth socketserver's traceback on the terminal. Any other error in the
connection's thread is still printed with its traceback.

`ApiFront` is the local API Gateway HTTP API: it matches a request against the template's routes
(`Deployed.http_routes`), builds the payload-2.0 event (`tether_local.aws.apigw.http_api_event`),
invokes the route's function through the local AWS's Lambda runtime (its own execution
environment, its own timeout) and turns the result back into HTTP. As API Gateway does, it
waits at most `integration_timeout_s` (30 s, HTTP APIs' integration timeout) for the function,
whatever the function's own timeout, and then answers 503 `{"message":"Service Unavailable"}`
(the function runs on until its own timeout; nobody reads its answer); a function error, a
timeout included, is 500 `{"message":"Internal Server Error"}`.

Throttles, as the template sets them: each route has its own token bucket (`TokenBucket`, rate
and burst from the stage's route settings, else its default route settings; `Deployed.
http_routes`), full when the front starts. A request that finds its route's bucket empty is
answered 429 `{"message":"Too Many Requests"}` before anything else about it is looked at, and
no function runs: what API Gateway does, so a flood of junk heartbeats locally crowds out real
ones as it would in AWS. (The account-level quota, 10,000 a second, is not modelled: one
machine cannot reach it.)

SigV4 on the local front: *the shape is checked, the signature is not*. A route with
`AWS_IAM` authorization needs an `Authorization: AWS4-HMAC-SHA256 Credential=<key id>/...`
header, else it answers 403 `{"message": "Forbidden"}` as API Gateway does; the caller becomes
`arn:aws:iam::<account>:user/<key id>`. Verifying the signature would need the caller's secret,
and locally every credential is moto's fake one: checking it would prove nothing. The agent's
bearer-token auth is real (the heartbeat function checks it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

from tether_local.aws.apigw import http_api_event
from tether_local.aws.deployed import ACCOUNT_ID, HttpRoute, Throttle
from tether_local.aws.lambda_runtime import InvokeResult

LOG = logging.getLogger(__name__)

Handler = Callable[[httpx.Request], httpx.Response]
HeartbeatObserver = Callable[[dict[str, Any]], None]
Invoke = Callable[[str, dict[str, Any]], InvokeResult]  # function ARN, event → result

API_GATEWAY_TIMEOUT_S = 30.0  # an HTTP API's integration timeout (its maximum, and default)
HEARTBEAT_PATH = "/agent/heartbeat"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
_SIGV4 = re.compile(r"^AWS4-HMAC-SHA256\s+Credential=(?P<key>[A-Za-z0-9]+)/")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})


class DropConnection(Exception):
    """Raised by a handler: close the connection without answering (a cut network)."""


# What a socket raises when the client has hung up (reset, or closed before the answer).
CLIENT_GONE = (BrokenPipeError, ConnectionResetError)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a heartbeat storm connects hundreds at once (default: 5)
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints every error of a connection's thread with its traceback; a
        client that hung up is not one (module docstring)."""
        gone = sys.exc_info()[1]
        if isinstance(gone, CLIENT_GONE):
            LOG.debug("client %s hung up: %s", client_address, gone)
            return
        super().handle_error(request, client_address)


def _request_handler(handler: Handler) -> type[BaseHTTPRequestHandler]:
    class _Adapter(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            LOG.debug("%s " + format, self.address_string(), *args)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._answer(httpx.Response(413, json={"message": "Request Entity Too Large"}))
                return
            body = self.rfile.read(length) if length else b""
            host = self.headers.get("Host") or "127.0.0.1"
            request = httpx.Request(
                self.command,
                f"http://{host}{self.path}",
                headers=[(k, v) for k, v in self.headers.items()],
                content=body,
            )
            try:
                response = handler(request)
            except (DropConnection, httpx.TransportError):
                self.close_connection = True
                return
            except Exception:  # a simulator bug must not kill the server thread silently
                LOG.exception("loopback handler failed for %s %s", self.command, self.path)
                response = httpx.Response(500, json={"message": "Internal Server Error"})
            self._answer(response)

        def _answer(self, response: httpx.Response) -> None:
            content = response.read()
            self.send_response(response.status_code)
            for name, value in response.headers.multi_items():
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

    return _Adapter


class LoopbackServer:
    """Serves `handler` on 127.0.0.1 in daemon threads; a context manager."""

    def __init__(self, handler: Handler, *, port: int = 0, name: str = "loopback") -> None:
        self.name = name
        self._server = _Server(("127.0.0.1", port), _request_handler(handler))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.name}-http",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> LoopbackServer:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- the API front ------------------------------------------------------------------------------


class TokenBucket:
    """API Gateway's throttle for one route: `rate_per_s` tokens a second flow into a bucket
    that holds `burst`, full at the start; each request takes one, or is refused."""

    def __init__(self, throttle: Throttle, clock: Callable[[], float] = time.monotonic) -> None:
        self.throttle = throttle
        self._clock = clock
        self._tokens = float(throttle.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            refill = max(0.0, now - self._at) * self.throttle.rate_per_s
            self._tokens = min(float(self.throttle.burst), self._tokens + refill)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


@dataclass(frozen=True)
class _CompiledRoute:
    method: str | None  # None: ANY
    pattern: re.Pattern[str] | None  # None: $default
    route: HttpRoute


def _compile(route: HttpRoute) -> _CompiledRoute:
    if route.route_key == "$default":
        return _CompiledRoute(None, None, route)
    method, _, path = route.route_key.partition(" ")
    regex = ""
    for part in re.split(r"(\{[^}]+\})", path):
        if part.startswith("{") and part.endswith("}"):
            name = part[1:-1]
            regex += f"(?P<{name.rstrip('+')}>.+)" if name.endswith("+") else f"(?P<{name}>[^/]+)"
        else:
            regex += re.escape(part)
    return _CompiledRoute(None if method == "ANY" else method, re.compile(regex), route)


class ApiFront:
    """API Gateway HTTP API on loopback, dispatching to the deployed functions by route.

    `cut_heartbeats(job_id, generation)` makes the front drop that generation's heartbeats (the
    host's network to the API is cut; a chaos control). `observe_heartbeats(fn)` passes every
    heartbeat body the function answered 200 to `fn` (the stack bills the bytes it reports;
    the flood scenario times the real agent's heartbeats). `job_sent(job_id, generation)` is
    the first job a heartbeat reply carried to that generation (`JobBootstrap` as JSON): what
    its host received besides its instance environment (the demo's evidence reads both)."""

    def __init__(
        self,
        routes: Iterable[HttpRoute],
        *,
        invoke: Invoke,
        account_id: str = ACCOUNT_ID,
        integration_timeout_s: float = API_GATEWAY_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        routes = list(routes)
        self._buckets = {
            r.route_key: TokenBucket(r.throttle, clock) for r in routes if r.throttle is not None
        }
        compiled = [_compile(r) for r in routes]
        # Specific routes first (API Gateway picks the most specific match), $default last.
        self._routes = sorted(compiled, key=lambda c: (c.pattern is None, -len(c.route.route_key)))
        self._account_id = account_id
        self._invoke_function = invoke
        self.integration_timeout_s = integration_timeout_s
        self._lock = threading.Lock()
        self._cut: set[tuple[str, int]] = set()
        self._observers: list[HeartbeatObserver] = []
        self._jobs_sent: dict[tuple[str, int], dict[str, Any]] = {}
        self.requests_served = 0
        self.status_counts: dict[int, int] = {}
        self.throttled: dict[str, int] = {}  # route key → requests answered 429

    # chaos and observation

    def cut_heartbeats(self, job_id: str, generation: int) -> None:
        with self._lock:
            self._cut.add((job_id, generation))

    def restore_heartbeats(self, job_id: str, generation: int) -> None:
        with self._lock:
            self._cut.discard((job_id, generation))

    def observe_heartbeats(self, observer: HeartbeatObserver) -> None:
        self._observers.append(observer)

    def stop_observing(self, observer: HeartbeatObserver) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def job_sent(self, job_id: str, generation: int) -> dict[str, Any] | None:
        with self._lock:
            return self._jobs_sent.get((job_id, generation))

    def throttle(self, route_key: str) -> Throttle | None:
        """The route's bucket as the template set it (None: not throttled)."""
        bucket = self._buckets.get(route_key)
        return bucket.throttle if bucket is not None else None

    # serving

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = self._dispatch(request)
        with self._lock:
            self.requests_served += 1
            self.status_counts[response.status_code] = (
                self.status_counts.get(response.status_code, 0) + 1
            )
        return response

    def _dispatch(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        heartbeat = _heartbeat_identity(request) if path == HEARTBEAT_PATH else None
        if heartbeat is not None:
            with self._lock:
                if (heartbeat["job_id"], heartbeat["generation"]) in self._cut:
                    raise DropConnection
        match = self._match(request.method, path)
        if match is None:
            return httpx.Response(404, json={"message": "Not Found"})
        route, params = match
        bucket = self._buckets.get(route.route_key)
        if bucket is not None and not bucket.take():
            with self._lock:
                self.throttled[route.route_key] = self.throttled.get(route.route_key, 0) + 1
            return httpx.Response(429, json={"message": "Too Many Requests"})
        iam_arn: str | None = None
        if route.authorization_type == "AWS_IAM":
            signed = _SIGV4.match(request.headers.get("authorization", ""))
            if signed is None:
                return httpx.Response(403, json={"message": "Forbidden"})
            iam_arn = f"arn:aws:iam::{self._account_id}:user/{signed['key']}"
        event = _event(request, route, params, iam_arn)
        response = self._invoke(route.function_arn, event)
        if heartbeat is not None and response.status_code == HTTPStatus.OK:
            self._note_job_sent(heartbeat, response)
            for observer in list(self._observers):
                try:
                    observer(heartbeat)
                except Exception:
                    LOG.exception("heartbeat observer failed")
        return response

    def _note_job_sent(self, heartbeat: Mapping[str, Any], response: httpx.Response) -> None:
        try:
            job = json.loads(response.content).get("job")
        except (ValueError, AttributeError):
            return
        if isinstance(job, dict):
            with self._lock:
                self._jobs_sent.setdefault((heartbeat["job_id"], heartbeat["generation"]), job)

    def _match(self, method: str, path: str) -> tuple[HttpRoute, dict[str, str]] | None:
        for compiled in self._routes:
            if compiled.pattern is None:
                return compiled.route, {}
            if compiled.method not in (None, method):
                continue
            found = compiled.pattern.fullmatch(path)
            if found:
                return compiled.route, found.groupdict()
        return None

    def _invoke(self, function_arn: str, event: dict[str, Any]) -> httpx.Response:
        outcome: list[InvokeResult] = []
        answered = threading.Event()

        def call() -> None:
            try:
                outcome.append(self._invoke_function(function_arn, event))
            except Exception:
                LOG.exception("invoking %s failed", function_arn)
            finally:
                answered.set()

        # Its own thread, so that the front can stop waiting while the function runs on.
        threading.Thread(target=call, name="api-integration", daemon=True).start()
        if not answered.wait(self.integration_timeout_s):
            LOG.warning("%s: no answer within %.0f s", function_arn, self.integration_timeout_s)
            return httpx.Response(503, json={"message": "Service Unavailable"})
        if not outcome:
            return httpx.Response(500, json={"message": "Internal Server Error"})
        text, errored, _ = outcome[0]
        try:
            payload = json.loads(text or "null")
        except ValueError:
            payload, errored = None, True
        if errored or not isinstance(payload, dict):
            # What API Gateway answers when the integration fails.
            LOG.error("function %s failed: %s", function_arn, payload)
            return httpx.Response(500, json={"message": "Internal Server Error"})
        if "statusCode" not in payload:  # a 2.0 integration may return a bare JSON body
            return httpx.Response(200, json=payload)
        body = payload.get("body") or ""
        content = base64.b64decode(body) if payload.get("isBase64Encoded") else body.encode()
        headers = {str(k): str(v) for k, v in (payload.get("headers") or {}).items()}
        response = httpx.Response(int(payload["statusCode"]), headers=headers, content=content)
        for cookie in payload.get("cookies") or []:
            response.headers.append("set-cookie", str(cookie))  # type: ignore[attr-defined]
        return response


def _heartbeat_identity(request: httpx.Request) -> dict[str, Any] | None:
    """The heartbeat body if it names a job and generation (the function validates the rest)."""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        body = json.loads(request.content or b"null")
        if (
            isinstance(body, dict)
            and isinstance(body.get("job_id"), str)
            and isinstance(body.get("generation"), int)
        ):
            return body
    return None


def _event(
    request: httpx.Request, route: HttpRoute, params: dict[str, str], iam_arn: str | None
) -> dict[str, Any]:
    query: dict[str, str] = {}
    for key, value in parse_qsl(urlsplit(str(request.url)).query, keep_blank_values=True):
        # API Gateway joins repeated parameters with commas.
        query[key] = f"{query[key]},{value}" if key in query else value
    raw = request.content
    body: str | None = None
    is_base64 = False
    if raw:
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            body, is_base64 = base64.b64encode(raw).decode(), True
    headers = {k.lower(): v for k, v in request.headers.items()}
    event = http_api_event(
        request.method,
        request.url.path,
        body=body,
        headers=headers,
        query=query or None,
        iam_arn=iam_arn,
        route_key=route.route_key,
        path_parameters=params or None,
        source_ip="127.0.0.1",
    )
    event["isBase64Encoded"] = is_base64
    event["rawQueryString"] = urlsplit(str(request.url)).query
    return event


__all__ = [
    "API_GATEWAY_TIMEOUT_S",
    "HEARTBEAT_PATH",
    "ApiFront",
    "DropConnection",
    "LoopbackServer",
    "TokenBucket",
]
