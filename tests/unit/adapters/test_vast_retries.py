"""The Vast adapter's errors, retries and deadline: typed errors, jittered back-off
under a deadline, the key never in a URL."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

from functions.adapters.vast import (
    AuthFailed,
    RateLimited,
    VastClient,
    VastError,
    VastUnavailable,
)
from functions.domain.jobspec import Resources
from tests.unit.adapters.vast_answers import (
    KEY,
    RATE_LIMIT_TEXT,
    Recorder,
    make_client,
    ok,
    rent_kwargs,
)

# -- errors, retries, deadline ---------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_raises_auth_failed_without_retrying(status: int) -> None:
    body = {"success": False, "error": "auth_error", "msg": "Invalid API key"}
    recorder = Recorder(httpx.Response(status, json=body))
    client, sleeps = make_client(recorder)
    with pytest.raises(AuthFailed) as caught:
        client.list_instances()
    assert caught.value.status == status
    assert "Invalid API key" in caught.value.message
    assert len(recorder.requests) == 1 and sleeps == []


def test_429_is_retried_with_growing_jittered_backoff() -> None:
    recorder = Recorder(*[httpx.Response(429, text=RATE_LIMIT_TEXT)] * 5, ok({"offers": []}))
    client, sleeps = make_client(recorder, seed=1)

    client.search_offers(Resources())

    assert len(recorder.requests) == 6
    assert len(sleeps) == 5
    assert 0.15 <= sleeps[0] <= 0.225
    ratios = [b / a for a, b in itertools.pairwise(sleeps)]
    assert all(1.5 <= r <= 2.0 for r in ratios), ratios
    assert len({round(r, 6) for r in ratios}) > 1  # jittered, not a fixed factor
    other, other_sleeps = make_client(
        Recorder(*[httpx.Response(429, text=RATE_LIMIT_TEXT)] * 5, ok({"offers": []})), seed=2
    )
    other.search_offers(Resources())
    assert other_sleeps != sleeps  # another seed, other delays


def test_5xx_and_connection_errors_are_retried() -> None:
    recorder = Recorder(
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.Response(502, text="<html>Bad Gateway</html>"),
        httpx.Response(503, json={"success": False, "error": "unavailable", "msg": "busy"}),
        ok({"instances": {"id": 5, "actual_status": "running"}}),
    )
    client, sleeps = make_client(recorder)
    instance = client.show_instance(5)
    assert instance is not None and instance.actual_status == "running"
    assert len(sleeps) == 4


def test_a_429_storm_past_the_deadline_raises_rate_limited() -> None:
    recorder = Recorder(httpx.Response(429, text=RATE_LIMIT_TEXT))
    client, sleeps = make_client(recorder, deadline_s=3)
    with pytest.raises(RateLimited) as caught:
        client.list_instances()
    assert caught.value.status == 429
    assert "too frequent" in caught.value.message
    assert sum(sleeps) <= 3
    assert len(sleeps) >= 4  # it did retry, and gave up only at the deadline
    assert len(recorder.requests) == len(sleeps) + 1


@pytest.mark.parametrize(
    ("answer", "status"),
    [(httpx.Response(500, text="Internal Server Error"), 500), (httpx.ConnectError("down"), None)],
)
def test_an_outage_past_the_deadline_raises_unavailable(answer: Any, status: int | None) -> None:
    client, sleeps = make_client(Recorder(answer), deadline_s=2)
    with pytest.raises(VastUnavailable) as caught:
        client.stop_instance(5)
    assert caught.value.status == status
    assert 0 < sum(sleeps) <= 2


def test_backoff_is_capped() -> None:
    client, sleeps = make_client(Recorder(httpx.Response(503, text="busy")), deadline_s=120)
    with pytest.raises(VastUnavailable):
        client.list_instances()
    assert max(sleeps) <= 8.0
    assert sum(sleeps) <= 120


def test_the_key_never_appears_in_a_url() -> None:
    page = {"instances": [{"id": 1}], "next_token": None}
    answers: dict[tuple[str, str], httpx.Response] = {
        ("POST", "/api/v0/bundles/"): ok({"offers": []}),
        ("PUT", "/api/v0/asks/9/"): ok({"success": True, "new_contract": 1}),
        ("GET", "/api/v1/instances/"): ok(page),
        ("GET", "/api/v0/instances/1/"): ok({"instances": {"id": 1}}),
        ("PUT", "/api/v0/instances/1/"): ok({"success": True}),
        ("DELETE", "/api/v0/instances/1/"): ok({"success": True}),
        ("GET", "/api/v0/charges/"): ok({"results": [], "next_token": None}),
    }
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[(request.method, request.url.path)]

    client, _ = make_client(handler)
    client.search_offers(Resources())
    client.rent(9, **rent_kwargs())
    client.list_instances()
    client.show_instance(1)
    client.stop_instance(1)
    client.start_instance(1)
    client.set_label(1, "tether:job-7:g1")
    client.destroy_instance(1)
    client.charges()
    assert len(seen) == 9
    for request in seen:
        assert KEY not in str(request.url)
        assert "api_key" not in str(request.url)
        assert request.headers["authorization"] == f"Bearer {KEY}"


def test_a_non_json_success_is_an_error() -> None:
    client, _ = make_client(Recorder(httpx.Response(200, text="<html>maintenance</html>")))
    with pytest.raises(VastError, match="non-JSON"):
        client.list_instances()


def test_client_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="api_key"):
        VastClient("  ")
    with pytest.raises(ValueError, match="deadline_s"):
        VastClient("k", deadline_s=0)
