"""The flood the `heartbeat-flood` scenario sends (`tether_local.demo.flood`): loopback only,
bounded in count, every kind of junk in the mix. Against a loopback server that counts."""

from __future__ import annotations

import itertools
import threading

import httpx
import pytest

from tether_local.demo import JUNK_STEP, Flood, junk_requests
from tether_local.http import LoopbackServer


def test_a_flood_goes_to_loopback_only() -> None:
    with pytest.raises(ValueError, match="local front only"):
        Flood("https://abc.execute-api.us-east-1.amazonaws.com", "j", rate_per_s=1, duration_s=1)


def test_the_junk_cycles_through_every_kind() -> None:
    kinds = {kind for kind, _, _ in itertools.islice(junk_requests("j-1"), 16)}
    assert kinds == {
        "wrong token",
        "unknown job",
        "later generation",
        "no token",
        "malformed",
        "not json",
        "unbounded numbers",
        "text body",
    }
    wrong = next(body for kind, _, body in junk_requests("j-1") if kind == "wrong token")
    assert f'"step": {JUNK_STEP}'.encode() in wrong and b'"job_id": "j-1"' in wrong


def test_a_flood_is_bounded_in_count_and_counts_every_answer() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def handle(request: httpx.Request) -> httpx.Response:
        with lock:
            seen.append(request.url.path)
        return httpx.Response(429 if len(seen) % 2 else 401, json={"message": "x"})

    with LoopbackServer(handle) as server:
        report = Flood(server.url, "j-1", rate_per_s=400, duration_s=0.25, threads=3).run()
    assert report.sent == len(seen) <= 100  # 400/s × 0.25 s
    assert set(seen) == {"/agent/heartbeat"}
    assert sum(report.statuses.values()) + report.dropped == report.sent
    assert set(report.statuses) <= {401, 429} and report.accepted == 0
