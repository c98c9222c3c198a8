"""The Cloudflare adapter, against httpx.MockTransport in Cloudflare's real shapes (the
simulator's own tests: tests/unit/local/test_cloudflare_sim.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import httpx
import pytest

from functions.adapters.cloudflare import (
    CloudflareAccount,
    CloudflareAuthError,
    CloudflareBadRequest,
    CloudflareClient,
    CloudflareRateLimited,
    CloudflareUnavailable,
    RequestBudget,
    TempCredentials,
    mint_job_credentials,
)
from functions.domain.heartbeat_contract import StorageCredentials, StorageKey

ACCOUNT = "023e105f4ecef8ad9ca31a8372d0c353"
TOKEN = "Sn3lZJTBX6kkg7OdcBUAxOO963GEIyGQqnFTOFYY"
URL = f"https://api.cloudflare.com/client/v4/accounts/{ACCOUNT}/r2/temp-access-credentials"
OK_RESULT = {
    "accessKeyId": "9d0e1b3c8a4f4e2db2c1a0f9e8d7c6b5",
    "secretAccessKey": "s3cr3t" * 10,
    "sessionToken": "session-token-value",
}
OK_BODY = {"success": True, "errors": [], "messages": [], "result": OK_RESULT}


class FakeClock:
    """Monotonic and wall clock in one; `sleep` advances it (no real waiting)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def cf_error(status: int, code: int, message: str, **headers: str) -> httpx.Response:
    body = {"success": False, "errors": [{"code": code, "message": message}], "messages": []}
    return httpx.Response(status, json=body, headers=headers)


Handler = Callable[[httpx.Request], httpx.Response]


def make_client(
    handler: Handler, clock: FakeClock | None = None, **kw: object
) -> tuple[CloudflareClient, list[httpx.Request], FakeClock]:
    clock = clock or FakeClock()
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    kw.setdefault("budget", RequestBudget(clock=clock))
    client = CloudflareClient(
        ACCOUNT,
        TOKEN,
        client=httpx.Client(transport=httpx.MockTransport(record)),
        sleep=clock.sleep,
        monotonic=clock,
        wall_clock=clock,
        rng=random.Random(7),
        **kw,  # type: ignore[arg-type]
    )
    return client, seen, clock


def replies(*responses: httpx.Response | Exception) -> Handler:
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return item

    return handler


def mint(client: CloudflareClient, **kw: object) -> TempCredentials:
    args: dict[str, object] = {
        "bucket": "tether-ckpt",
        "parent_access_key_id": "parent-key",
        "prefix": "jobs/j1/",
        "ttl_s": 3600,
    }
    args.update(kw)
    return client.mint_temp_credentials(**args)  # type: ignore[arg-type]


# --- adapter --------------------------------------------------------------------------------


def test_mint_sends_the_documented_request_and_parses_the_reply() -> None:
    client, seen, clock = make_client(replies(httpx.Response(200, json=OK_BODY)))
    creds = client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/j1/", 3600)
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == URL
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert json.loads(request.content) == {
        "bucket": "tether-ckpt",
        "parentAccessKeyId": "parent-key",
        "permission": "object-read-write",
        "ttlSeconds": 3600,
        "prefixes": ["jobs/j1/"],
    }
    assert creds.access_key_id == OK_RESULT["accessKeyId"]
    assert creds.secret_access_key == OK_RESULT["secretAccessKey"]
    assert creds.session_token == "session-token-value"
    assert creds.expires_at == clock.now + 3600


def test_the_token_never_leaves_the_authorization_header() -> None:
    client, seen, _ = make_client(replies(cf_error(403, 10000, "Authentication error")))
    with pytest.raises(CloudflareAuthError) as info:
        mint(client)
    assert TOKEN not in str(seen[0].url) and TOKEN not in seen[0].content.decode()
    assert TOKEN not in str(info.value) and TOKEN not in repr(client)
    creds_client, _, _ = make_client(replies(httpx.Response(200, json=OK_BODY)))
    assert "s3cr3t" not in repr(mint(creds_client))


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"ttl_s": 899}, "ttl_s"),
        ({"ttl_s": 604_801}, "ttl_s"),
        ({"ttl_s": 1800, "lease_s": 3600}, "lease"),
        ({"prefix": "jobs/j1"}, "prefix"),
        ({"prefix": "/jobs/j1/"}, "prefix"),
        ({"bucket": ""}, "bucket"),
        ({"permission": "everything"}, "permission"),
    ],
)
def test_bad_arguments_are_refused_before_any_request(kw: dict[str, object], field: str) -> None:
    client, seen, _ = make_client(replies(httpx.Response(200, json=OK_BODY)))
    with pytest.raises(ValueError, match=field):
        mint(client, **kw)
    assert seen == []


def test_ttl_bounds_are_inclusive_and_the_floor_is_configurable() -> None:
    client, seen, _ = make_client(replies(httpx.Response(200, json=OK_BODY)))
    mint(client, ttl_s=900)
    mint(client, ttl_s=604_800, lease_s=604_800)
    demo, _, _ = make_client(replies(httpx.Response(200, json=OK_BODY)), min_ttl_s=30)
    mint(demo, ttl_s=30)  # the local demo compresses hours into a minute
    assert len(seen) == 2


def test_retries_5xx_and_connection_errors_with_jittered_backoff() -> None:
    client, seen, clock = make_client(
        replies(
            cf_error(502, 10001, "bad gateway"),
            httpx.ConnectError("connection refused"),
            cf_error(503, 10001, "unavailable"),
            httpx.Response(200, json=OK_BODY),
        )
    )
    assert mint(client)
    assert len(seen) == 4
    assert len(clock.sleeps) == 3
    for attempt, pause in enumerate(clock.sleeps, start=1):
        assert 0 <= pause <= 0.25 * 2 ** (attempt - 1)
    assert len(set(clock.sleeps)) == 3  # jittered, not a fixed schedule


def test_gives_up_at_the_deadline() -> None:
    client, seen, clock = make_client(replies(cf_error(500, 10001, "boom")), deadline_s=30)
    start = clock.now
    with pytest.raises(CloudflareUnavailable, match="500"):
        mint(client)
    assert clock.now - start <= 30
    assert 3 < len(seen) < 100


def test_timeouts_count_as_unavailable() -> None:
    client, _, _ = make_client(replies(httpx.ReadTimeout("slow")), deadline_s=5)
    with pytest.raises(CloudflareUnavailable, match="ReadTimeout"):
        mint(client)


def test_rate_limit_block_is_honoured_without_more_requests() -> None:
    client, seen, clock = make_client(
        replies(
            cf_error(429, 971, "Please wait and consider throttling", **{"Retry-After": "300"}),
            httpx.Response(200, json=OK_BODY),
        ),
        deadline_s=30,
    )
    with pytest.raises(CloudflareRateLimited) as info:
        mint(client)
    assert info.value.retry_after_s == 300
    assert len(seen) == 1
    clock.now += 200
    with pytest.raises(CloudflareRateLimited) as again:  # still blocked: nothing is sent
        mint(client)
    assert again.value.retry_after_s == pytest.approx(100)
    assert len(seen) == 1
    clock.now += 80  # 20 s left: within the deadline, so it waits them out
    assert mint(client)
    assert len(seen) == 2
    assert clock.sleeps[-1] == pytest.approx(20)


def test_a_429_without_retry_after_blocks_for_five_minutes() -> None:
    client, _, _ = make_client(
        replies(cf_error(429, 971, "slow down"), httpx.Response(200, json=OK_BODY))
    )
    with pytest.raises(CloudflareRateLimited) as info:
        mint(client)
    assert info.value.retry_after_s == 300


def test_short_retry_after_is_waited_out_within_the_deadline() -> None:
    client, seen, clock = make_client(
        replies(
            cf_error(429, 971, "slow down", **{"Retry-After": "2"}),
            httpx.Response(200, json=OK_BODY),
        )
    )
    assert mint(client)
    assert len(seen) == 2
    assert clock.sleeps[0] == 2


def test_local_request_budget_stops_us_before_cloudflare_does() -> None:
    clock = FakeClock()
    budget = RequestBudget(capacity=2, per_s=10, clock=clock)  # one request per 5 s
    client, seen, _ = make_client(
        replies(httpx.Response(200, json=OK_BODY)), clock=clock, budget=budget, deadline_s=1
    )
    mint(client)
    mint(client)
    with pytest.raises(CloudflareRateLimited) as info:
        mint(client)
    assert info.value.retry_after_s == pytest.approx(5)
    assert len(seen) == 2
    clock.now += 5
    mint(client)
    assert len(seen) == 3


def test_request_budget_waits_when_the_deadline_allows() -> None:
    clock = FakeClock()
    budget = RequestBudget(capacity=1, per_s=4, clock=clock)
    client, seen, _ = make_client(
        replies(httpx.Response(200, json=OK_BODY)), clock=clock, budget=budget, deadline_s=30
    )
    mint(client)
    mint(client)
    assert clock.sleeps == [pytest.approx(4)]
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (cf_error(403, 10000, "Authentication error"), CloudflareAuthError),
        (cf_error(401, 10002, "Unauthorized"), CloudflareAuthError),
        (cf_error(400, 9106, "Missing X-Auth-Key, X-Auth-Email or Authorization headers"),
         CloudflareAuthError),
        (cf_error(404, 10006, "The specified bucket does not exist."), CloudflareBadRequest),
        (cf_error(400, 10040, "ttlSeconds: must be a number"), CloudflareBadRequest),
        (httpx.Response(200, json={"success": False, "errors": [{"code": 1, "message": "no"}]}),
         CloudflareBadRequest),
        (httpx.Response(200, json={"success": True, "result": {"accessKeyId": "a"}}),
         CloudflareUnavailable),
        (httpx.Response(200, text="<html>"), CloudflareUnavailable),
    ],
)  # fmt: skip
def test_errors_are_typed_and_client_errors_are_not_retried(
    response: httpx.Response, error: type[Exception]
) -> None:
    client, seen, _ = make_client(replies(response))
    with pytest.raises(error):
        mint(client)
    assert len(seen) == 1


def test_error_messages_carry_cloudflare_codes() -> None:
    client, _, _ = make_client(
        replies(cf_error(404, 10006, "The specified bucket does not exist."))
    )
    with pytest.raises(CloudflareBadRequest) as info:
        mint(client)
    assert info.value.status == 404 and info.value.codes == (10006,)
    assert "bucket does not exist" in str(info.value)


def test_a_generation_gets_a_read_key_on_the_job_and_a_write_key_on_its_own_prefix() -> None:
    client, seen, clock = make_client(lambda r: httpx.Response(200, json=OK_BODY))
    account = CloudflareAccount(
        account_id=ACCOUNT, api_token=TOKEN, parent_access_key_id="parent-key", bucket="b1"
    )
    creds = mint_job_credentials(
        client, account, "job-7", 3, ttl_s=4 * 3600, lease_s=3 * 3600,
        endpoint="https://r2.test",
    )  # fmt: skip
    bodies = [json.loads(r.content) for r in seen]
    assert [(b["permission"], b["prefixes"]) for b in bodies] == [
        ("object-read-only", ["jobs/job-7/"]),
        ("object-read-write", ["jobs/job-7/g3/"]),
    ]
    for body in bodies:
        assert (body["bucket"], body["parentAccessKeyId"]) == ("b1", "parent-key")
        assert body["ttlSeconds"] == 4 * 3600

    def key(prefix: str) -> StorageKey:
        return StorageKey(
            access_key_id=OK_RESULT["accessKeyId"],
            secret_access_key=OK_RESULT["secretAccessKey"],
            session_token=OK_RESULT["sessionToken"],
            expires_at=clock.now + 4 * 3600,
            prefix=prefix,
        )

    assert creds == StorageCredentials(
        endpoint="https://r2.test",
        bucket="b1",
        read=key("jobs/job-7/"),
        write=key("jobs/job-7/g3/"),
    )
    assert creds.expires_at == clock.now + 4 * 3600


def test_job_credentials_must_outlive_the_lease_they_go_out_with() -> None:
    client, seen, _ = make_client(lambda r: httpx.Response(200, json=OK_BODY))
    account = CloudflareAccount(
        account_id=ACCOUNT, api_token=TOKEN, parent_access_key_id="parent-key", bucket="b1"
    )
    with pytest.raises(ValueError, match="shorter than the lease"):
        mint_job_credentials(client, account, "job-7", 1, ttl_s=3600, lease_s=7200, endpoint="x")
    assert seen == []
