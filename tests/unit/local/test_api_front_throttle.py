"""The local API front's throttles (`tether_local.http`): a token bucket per route with the
template's rate and burst, and API Gateway's 429 when it is empty, before any function runs.
A fake clock and a fake function: no stack, no sleeps."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tether_local.aws.deployed import HttpRoute, Throttle
from tether_local.aws.lambda_runtime import InvokeResult
from tether_local.http import ApiFront, TokenBucket

HEARTBEAT = "POST /agent/heartbeat"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_gives_its_burst_then_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(Throttle(rate_per_s=2.0, burst=3), clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.4  # 0.8 of a token
    assert not bucket.take()
    clock.now += 0.1  # 1.0
    assert bucket.take()
    assert not bucket.take()
    clock.now += 60  # refills to the burst, never past it
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_a_bucket_of_zero_lets_nothing_through() -> None:
    """API Gateway: a route setting with one limit and not the other gets 0, and 0 is zero."""
    clock = Clock()
    bucket = TokenBucket(Throttle(rate_per_s=5.0, burst=0), clock)
    clock.now += 10
    assert not bucket.take()


class Functions:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, arn: str, event: dict[str, Any]) -> InvokeResult:
        self.calls.append(event["routeKey"])
        return json.dumps({"statusCode": 200, "body": "{}"}), False, ""


def front(clock: Clock, functions: Functions) -> ApiFront:
    routes = [
        HttpRoute(HEARTBEAT, "arn:hb", "NONE", "2.0", Throttle(rate_per_s=1.0, burst=2)),
        HttpRoute("GET /jobs", "arn:jobs", "NONE", "2.0", Throttle(rate_per_s=1.0, burst=1)),
        HttpRoute("$default", "arn:jobs", "NONE", "2.0", None),
    ]
    return ApiFront(routes, invoke=functions, clock=clock)


def post_heartbeat(api: ApiFront) -> httpx.Response:
    return api.handle(httpx.Request("POST", "http://127.0.0.1/agent/heartbeat", content=b"{}"))


def test_past_the_burst_the_front_answers_429_without_running_the_function() -> None:
    clock, functions = Clock(), Functions()
    api = front(clock, functions)
    statuses = [post_heartbeat(api).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert functions.calls == [HEARTBEAT, HEARTBEAT]
    refused = post_heartbeat(api)
    assert refused.json() == {"message": "Too Many Requests"}
    assert api.throttled == {HEARTBEAT: 2}
    assert api.status_counts == {200: 2, 429: 2}
    clock.now += 1.0
    assert post_heartbeat(api).status_code == 200


def test_each_route_has_its_own_bucket() -> None:
    """A flood that empties the heartbeat route's bucket leaves the user routes' alone."""
    clock, functions = Clock(), Functions()
    api = front(clock, functions)
    for _ in range(10):
        post_heartbeat(api)
    assert api.handle(httpx.Request("GET", "http://127.0.0.1/jobs")).status_code == 200
    assert api.handle(httpx.Request("GET", "http://127.0.0.1/jobs")).status_code == 429
    for _ in range(5):  # $default: no throttle in this template
        assert api.handle(httpx.Request("GET", "http://127.0.0.1/other")).status_code == 200


def test_the_front_reports_each_routes_throttle() -> None:
    api = front(Clock(), Functions())
    assert api.throttle(HEARTBEAT) == Throttle(rate_per_s=1.0, burst=2)
    assert api.throttle("$default") is None
