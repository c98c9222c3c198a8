"""The agent's heartbeat client under throttling (docs/architecture.md#bounded-input): a 429 is
retried within half an interval, however long the 429s last, and never touches training or the
lease; other failures keep the doubling back-off. Through `Heartbeater.beat_once` with a mock
transport."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx
import pytest
from tether_agent.heartbeat_sender import Heartbeater, Lease
from tether_agent.protocol import GpuProbe, HeartbeatRequest

INTERVAL_S = 15.0


class Api:
    """Answers each heartbeat with the next status in `script` (then 200s)."""

    def __init__(self, *script: int) -> None:
        self.script = list(script)
        self.seen = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        status = self.script.pop(0) if self.script else 200
        if status == 429:
            return httpx.Response(429, json={"message": "Too Many Requests"})
        if status != 200:
            return httpx.Response(status, json={"message": "Internal Server Error"})
        now = time.time()
        reply = {"command": "continue", "lease_expires_at": now + 3600, "server_time": now}
        return httpx.Response(200, content=json.dumps(reply))


def heartbeater(api: Api, lease: Lease, commands: list[Any]) -> Heartbeater:
    return Heartbeater(
        url="http://api.invalid",
        token="t",
        interval_s=INTERVAL_S,
        build_request=lambda: HeartbeatRequest(
            job_id="j1",
            generation=1,
            phase="training",
            gpu=GpuProbe(available=False),
            agent_time=time.time(),
        ),
        lease=lease,
        on_command=lambda command, reason: commands.append((command, reason)),
        on_credentials=lambda creds: None,
        client=httpx.Client(transport=httpx.MockTransport(api)),
    )


@pytest.fixture(autouse=True)
def _seeded() -> None:
    random.seed(13)


def test_a_429_is_retried_within_half_an_interval_however_long_it_lasts() -> None:
    lease = Lease(time.time() + 600)
    commands: list[Any] = []
    beater = heartbeater(Api(*[429] * 40), lease, commands)
    delays = []
    for _ in range(40):
        assert beater.beat_once() is False
        delays.append(beater._delay())
    assert all(1.5 <= d <= 7.5 for d in delays), (min(delays), max(delays))  # 0.1–0.5 × 15 s
    assert beater.throttled == 40
    assert commands == []  # nothing told training to stop
    assert 590 < lease.remaining_s() <= 600  # and nothing renewed the lease


def test_after_the_429s_one_reply_renews_the_lease_and_the_pace_returns() -> None:
    lease = Lease(time.time() + 60)
    commands: list[Any] = []
    beater = heartbeater(Api(429, 429, 429), lease, commands)
    for _ in range(3):
        beater.beat_once()
    assert beater.beat_once() is True
    assert lease.remaining_s() > 3500
    assert beater._delay() == INTERVAL_S
    assert commands == [] and beater.last_error is None


def test_other_failures_still_back_off_doubling_to_eight_intervals() -> None:
    beater = heartbeater(Api(*[503] * 6), Lease(time.time() + 600), [])
    delays = []
    for _ in range(6):
        beater.beat_once()
        delays.append(beater._delay() / INTERVAL_S)
    # ×1, ×2, ×4, ×8, ×8, ×8, each jittered down by at most a quarter
    for got, factor in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert 0.75 * factor <= got <= factor


def test_a_429_between_server_errors_neither_resets_nor_grows_the_back_off() -> None:
    beater = heartbeater(Api(503, 503, 429, 503), Lease(time.time() + 600), [])
    beater.beat_once()
    beater.beat_once()
    beater.beat_once()  # 429: a quick retry
    assert beater._delay() <= 0.5 * INTERVAL_S
    beater.beat_once()  # the third server error: ×4
    assert 3 * INTERVAL_S <= beater._delay() <= 4 * INTERVAL_S


def test_an_agent_started_with_its_lease_out_waits_for_one_reply_to_renew_it() -> None:
    """Back from an outbid, the agent starts with the lease of its rent, long out: one reply
    from a supervised job renews it; without one it stays out (the agent then stops)."""
    lease = Lease(time.time() - 60)
    beater = heartbeater(Api(), lease, [])
    beater.start()
    try:
        assert beater.await_reply(intervals=0.5) is True
    finally:
        beater.stop(final=False)
    assert not lease.expired()

    out = Lease(time.time() - 60)
    silent = heartbeater(Api(*[500] * 10), out, [])
    silent.start()
    try:
        assert silent.await_reply(intervals=0.01) is False
    finally:
        silent.stop(final=False)
    assert out.expired()
