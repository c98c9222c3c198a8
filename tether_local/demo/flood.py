"""The `heartbeat-flood` scenario: junk heartbeats at a high rate against the local API front
while a job trains (docs/architecture.md#invariant-9).

`Flood` sends, over loopback only, a bounded number of junk `POST /agent/heartbeat` requests
(`rate_per_s × duration_s` at most, scheduled as Poisson arrivals over `duration_s`, and none
started past three times that when a loaded machine falls behind), from a few threads: wrong
tokens for the real job, unknown jobs, a later generation, no token, malformed and non-JSON
bodies, numbers no field accepts, the wrong content type. None may get a 2xx (that would renew
a lease) or a 5xx; past the heartbeat route's bucket they get API Gateway's 429, as do the real
agent's heartbeats that arrive while the bucket is empty. The agent retries those within half
an interval (`tether_agent.heartbeat_sender`), and the scenario checks that its heartbeats kept
getting through: no gap as long as the job's heartbeat timeout, so no host is called dead,
replaced or blamed.

A junk body that names the real job carries `JUNK_STEP`: were one ever stored, the job's stored
heartbeat would show that step.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tether_local.demo.job import DEMO_POLICY
from tether_local.demo.run import DemoRun
from tether_local.http import HEARTBEAT_PATH

JUNK_STEP = 987_654_321
JSON_TYPE = {"Content-Type": "application/json"}


def _body(job_id: str, generation: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "generation": generation,
        "phase": "training",
        "step": JUNK_STEP,
        "gpu": {"available": True, "responsive": True, "utilization_pct": 99.0},
        "agent_time": time.time(),
        **extra,
    }


def junk_requests(job_id: str, seed: int = 13) -> Iterator[tuple[str, dict[str, str], bytes]]:
    """(kind, headers, body) forever, cycling through the kinds of junk."""
    rng = random.Random(seed)
    n = 0
    while True:
        n += 1
        token = {"Authorization": f"Bearer junk-{rng.getrandbits(64):016x}"}
        kinds: list[tuple[str, dict[str, str], bytes]] = [
            ("wrong token", JSON_TYPE | token, json.dumps(_body(job_id)).encode()),
            ("unknown job", JSON_TYPE | token, json.dumps(_body(f"flood-{n}")).encode()),
            ("later generation", JSON_TYPE | token, json.dumps(_body(job_id, 2)).encode()),
            ("no token", JSON_TYPE, json.dumps(_body(job_id)).encode()),
            ("malformed", JSON_TYPE | token, b'{"job_id": "' + job_id.encode()),
            ("not json", JSON_TYPE | token, bytes(rng.getrandbits(8) for _ in range(32))),
            (
                "unbounded numbers",
                JSON_TYPE | token,
                json.dumps(_body(job_id)).replace(f'"step": {JUNK_STEP}', '"step": 1e400').encode(),
            ),
            ("text body", {"Content-Type": "text/plain"} | token, b"job_id=" + job_id.encode()),
        ]
        yield kinds[n % len(kinds)]


@dataclass
class FloodReport:
    sent: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    by_kind: dict[str, dict[int, int]] = field(default_factory=dict)
    dropped: int = 0  # no answer (the connection failed)
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def rate_per_s(self) -> float:
        return self.sent / max(self.ended_at - self.started_at, 1e-9)

    @property
    def accepted(self) -> int:
        """2xx answers: junk that would have been taken for a heartbeat."""
        return sum(n for status, n in self.statuses.items() if 200 <= status < 300)

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


class Flood:
    """Junk heartbeats to `api_url` at about `rate_per_s` for `duration_s`; `run()` blocks."""

    def __init__(
        self,
        api_url: str,
        job_id: str,
        *,
        rate_per_s: float,
        duration_s: float,
        threads: int = 6,
        seed: int = 13,
    ) -> None:
        if not api_url.startswith(("http://127.0.0.1:", "http://localhost:")):
            raise ValueError(f"a flood goes to the local front only, not {api_url}")
        self.url = api_url.rstrip("/") + HEARTBEAT_PATH
        self.rate_per_s = rate_per_s
        self.duration_s = duration_s
        self.max_requests = int(rate_per_s * duration_s)
        self.threads = threads
        self._junk = junk_requests(job_id, seed)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._next_due = self._deadline = self._hard_deadline = 0.0
        self._count = 0
        self.report = FloodReport()

    def run(self) -> FloodReport:
        self.report.started_at = time.time()
        self._next_due = time.monotonic()
        self._deadline = self._next_due + self.duration_s
        self._hard_deadline = self._next_due + 3 * self.duration_s
        workers = [
            threading.Thread(target=self._work, name=f"flood-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=self.duration_s + 60)
        self.report.ended_at = time.time()
        return self.report

    def _take(self) -> tuple[float, tuple[str, dict[str, str], bytes]] | None:
        """The next request and when it is due (Poisson arrivals), or None when done."""
        with self._lock:
            if (
                self._count >= self.max_requests
                or self._next_due >= self._deadline
                or time.monotonic() >= self._hard_deadline
            ):
                return None
            self._count += 1
            due = self._next_due
            self._next_due += self._rng.expovariate(self.rate_per_s)
            return due, next(self._junk)

    def _work(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            while (taken := self._take()) is not None:
                due, (kind, headers, body) = taken
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                try:
                    status: int | None = client.post(
                        self.url, headers=headers, content=body
                    ).status_code
                except httpx.HTTPError:
                    status = None
                with self._lock:
                    self.report.sent += 1
                    if status is None:
                        self.report.dropped += 1
                        continue
                    self.report.statuses[status] = self.report.statuses.get(status, 0) + 1
                    kinds = self.report.by_kind.setdefault(kind, {})
                    kinds[status] = kinds.get(status, 0) + 1


# --- the scenario ---------------------------------------------------------------------------


HEARTBEAT_ROUTE = "POST /agent/heartbeat"
FLOOD_S = 10.0
FLOOD_TIMES_THE_RATE = 3  # junk at three times the heartbeat route's rate: it is throttled
FLOOD_THREADS = 10


def drive_heartbeat_flood(run: DemoRun) -> None:
    """Junk heartbeats at three times the heartbeat route's rate for 10 s while g1 trains: the
    junk gets 4xx (429 past the bucket), the agent's own 429s are retried within half an
    interval, and its heartbeats never stop for a heartbeat timeout."""
    front = run.stack.front
    assert front is not None
    timeout_s = float(DEMO_POLICY["heartbeat_timeout_s"])
    g = run.wait_step(1, 50, checkpoint=50)
    throttle = front.throttle(HEARTBEAT_ROUTE)
    route_rate = throttle.rate_per_s if throttle is not None else 50.0
    rate = FLOOD_TIMES_THE_RATE * route_rate
    beats: list[float] = []

    def real_beat(body: dict[str, Any]) -> None:
        if body.get("job_id") == run.job_id:
            beats.append(time.time())

    front.observe_heartbeats(real_beat)
    throttled_before = front.throttled.get(HEARTBEAT_ROUTE, 0)
    server_errors_before = _front_5xx(run)
    bucket = f"{route_rate:g}/s, burst {throttle.burst}" if throttle else "none"
    run.say(f"FLOOD: junk heartbeats at {rate:g}/s for {FLOOD_S:g} s (route's bucket: {bucket})")
    flood = Flood(
        run.stack.api_url, run.job_id, rate_per_s=rate, duration_s=FLOOD_S, threads=FLOOD_THREADS
    )
    thread = threading.Thread(target=flood.run, name="flood", daemon=True)
    thread.start()
    run.wait("the flood to end", lambda _v: not thread.is_alive(), timeout_s=FLOOD_S + 60)
    report = flood.report
    # A heartbeat timeout after the flood: time for the monitor to judge what it left behind.
    view = run.wait(
        "a heartbeat timeout after the flood",
        lambda v: time.time() > report.ended_at + timeout_s and v,
        timeout_s=timeout_s + 30,
    )
    front.stop_observing(real_beat)
    stopped_at = time.time()
    agents_throttled = (
        front.throttled.get(HEARTBEAT_ROUTE, 0) - throttled_before - report.statuses.get(429, 0)
    )
    # The longest stretch from the flood's start without one of the agent's heartbeats getting
    # through (stored and answered 200: what the monitor's heartbeat timeout looks at).
    points = sorted([report.started_at, stopped_at, *(b for b in beats if b > report.started_at)])
    longest_gap = max(later - earlier for earlier, later in itertools.pairwise(points))
    run.say(
        f"flood over: {report.sent} junk requests at {report.rate_per_s:.0f}/s, answers "
        f"{dict(sorted(report.statuses.items()))}, {report.dropped} unanswered; the agent's "
        f"heartbeats: {agents_throttled} throttled, longest gap {longest_gap:.1f} s "
        f"(timeout {timeout_s:g} s)"
    )
    current = run.generation(view)
    run.checks["junk_never_accepted"] = report.accepted == 0 and run.max_step.get(1, 0) < JUNK_STEP
    run.checks["no_5xx"] = report.server_errors == 0 and _front_5xx(run) == server_errors_before
    run.checks["junk_throttled"] = report.statuses.get(429, 0) > 0
    run.checks["junk_stored_nothing"] = not _flood_items(run)
    run.checks["agent_heartbeats_kept_up"] = longest_gap < timeout_s
    run.checks["no_host_replaced_or_blamed"] = (
        current is not None
        and current.generation == g.generation
        and not current.host_blamed
        and not _host_items(run)
    )


def _front_5xx(run: DemoRun) -> int:
    assert run.stack.front is not None
    return sum(n for status, n in run.stack.front.status_counts.items() if status >= 500)


def _table_items(run: DemoRun) -> list[dict[str, Any]]:
    client = run.store.client
    pages = client.get_paginator("scan").paginate(TableName=run.stack.table_name())
    return [item for page in pages for item in page["Items"]]


def _flood_items(run: DemoRun) -> list[str]:
    """Items a junk heartbeat could have written: any key naming a flood job."""
    return [item["pk"]["S"] for item in _table_items(run) if "flood-" in item["pk"]["S"]]


def _host_items(run: DemoRun) -> list[str]:
    """Host blame for this job (`HOST#<machine_id>` items naming it): a healthy host flooded
    out would be remembered there. Other jobs on the same stack may have blamed theirs."""
    return [
        item["pk"]["S"]
        for item in _table_items(run)
        if item["pk"]["S"].startswith("HOST#") and run.job_id in json.dumps(item)
    ]


__all__ = ["JUNK_STEP", "Flood", "FloodReport", "drive_heartbeat_flood", "junk_requests"]
