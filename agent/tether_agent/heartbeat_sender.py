"""Heartbeats to the control plane and the lease they renew (docs/architecture.md#heartbeat).

A heartbeat goes out every interval (and at once when the phase changes). Errors, timeouts and
4xx/5xx replies back off (doubling up to 8 intervals, with jitter) and never touch training: only
the lease decides, and it is renewed only by a valid reply. The lease deadline is kept on the
monotonic clock from `lease_expires_at - server_time`, so a wrong host clock cannot stretch it.

A 429 is different: API Gateway's bucket for the heartbeat route was empty at that instant,
usually because somebody floods the route with junk (it has no authorizer). This agent's one
request per interval did not empty it, and waiting longer would only shrink its share of the
tokens while the monitor's heartbeat timeout runs, so it retries after 0.1–0.5 of an interval
(jittered) for as long as the 429s last: at most ten requests per interval, never a doubling
back-off, and training goes on meanwhile. Past `heartbeat_timeout_s` without a heartbeat the
monitor may call the host dead; past the lease the agent stops itself: a flood long enough for
that costs the job time, never money.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

import httpx
from pydantic import ValidationError

from tether_agent.protocol import (
    Command,
    HeartbeatReply,
    HeartbeatRequest,
    JobBootstrap,
    SecretValues,
    StorageCredentials,
)

log = logging.getLogger(__name__)
MAX_BACKOFF_INTERVALS = 8
THROTTLED_RETRY_INTERVALS = (0.1, 0.5)  # after a 429: this share of an interval, jittered
TOO_MANY_REQUESTS = 429


class Lease:
    """When the agent must stop on its own; renewed only by a heartbeat reply."""

    def __init__(self, expires_at_epoch: float) -> None:
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + (expires_at_epoch - time.time())

    def renew(self, expires_at: float, server_time: float) -> None:
        with self._lock:
            self._deadline = time.monotonic() + (expires_at - server_time)

    def remaining_s(self) -> float:
        with self._lock:
            return self._deadline - time.monotonic()

    def expired(self) -> bool:
        return self.remaining_s() <= 0


class Heartbeater:
    def __init__(
        self,
        url: str,
        token: str,
        interval_s: float,
        build_request: Callable[[], HeartbeatRequest],
        lease: Lease,
        on_command: Callable[[Command, str | None], None],
        on_credentials: Callable[[StorageCredentials], None],
        client: httpx.Client | None = None,
        on_secrets: Callable[[SecretValues], None] | None = None,
        on_job: Callable[[JobBootstrap], None] | None = None,
    ) -> None:
        self._url = url.rstrip("/") + "/agent/heartbeat"
        self._interval_s = interval_s
        self._build_request = build_request
        self._lease = lease
        self._on_command = on_command
        self._on_credentials = on_credentials
        self._on_secrets = on_secrets
        self._on_job = on_job
        timeout = max(1.0, min(10.0, 2 * interval_s))
        self._client = client or httpx.Client(
            timeout=timeout, headers={"Authorization": f"Bearer {token}"}
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._failures = 0  # in a row, of any kind
        self._backoff_failures = 0  # in a row, other than 429: the back-off's exponent
        self._throttled = False  # the last failure was a 429
        self.throttled = 0  # 429s answered so far
        self.sent = 0
        self.replied = threading.Event()  # set by the first valid reply
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def await_reply(self, intervals: float = 3) -> bool:
        """Send one now and wait up to `intervals` heartbeat intervals for a valid reply (an
        agent started with a lease already out: its first reply may renew it)."""
        self.poke()
        return self.replied.wait(intervals * self._interval_s)

    def poke(self) -> None:
        """Send one now (phase change, checkpoint uploaded)."""
        self._wake.set()

    def stop(self, final: bool = True) -> None:
        """Stop the loop; with `final`, send one last heartbeat (the end state) first."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=max(5.0, 3 * self._interval_s))
        if final:
            self.beat_once()
        self._client.close()

    def beat_once(self) -> bool:
        try:
            body = self._build_request().model_dump(mode="json")
            response = self._client.post(self._url, json=body)
        except (httpx.HTTPError, OSError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}")
        if response.status_code == TOO_MANY_REQUESTS:
            self.throttled += 1
            return self._failed("HTTP 429 (throttled): retrying soon", throttled=True)
        if response.status_code >= 400:
            return self._failed(f"HTTP {response.status_code}: {response.text[:200]}")
        try:
            reply = HeartbeatReply.model_validate_json(response.content)
        except ValidationError as exc:
            return self._failed(f"unreadable reply: {exc.errors()[:1]}")
        self._failures = self._backoff_failures = 0
        self._throttled = False
        self.sent += 1
        self.last_error = None
        if reply.credentials:
            self._on_credentials(reply.credentials)
        if reply.secrets is not None and self._on_secrets is not None:
            self._on_secrets(reply.secrets)
        if reply.job is not None and self._on_job is not None:
            self._on_job(reply.job)
        if reply.command == "continue":
            self._lease.renew(reply.lease_expires_at, reply.server_time)
        else:
            self._on_command(reply.command, reply.reason)
        self.replied.set()
        return True

    def _failed(self, error: str, *, throttled: bool = False) -> bool:
        self._failures += 1
        self._throttled = throttled
        if not throttled:
            self._backoff_failures += 1
        self.last_error = error
        log.warning("heartbeat failed (%d in a row): %s", self._failures, error)
        return False

    def _delay(self) -> float:
        """Until the next heartbeat: an interval; after a 429 a share of one; after any other
        failure a back-off doubling up to `MAX_BACKOFF_INTERVALS`."""
        if not self._failures:
            return self._interval_s
        if self._throttled:
            return self._interval_s * random.uniform(*THROTTLED_RETRY_INTERVALS)
        exponent = max(self._backoff_failures - 1, 0)
        factor: float = min(2.0**exponent, MAX_BACKOFF_INTERVALS)
        return self._interval_s * factor * random.uniform(0.75, 1.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.beat_once()
            self._wake.wait(self._delay())
            self._wake.clear()
