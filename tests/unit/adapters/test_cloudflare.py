"""The Cloudflare adapter (against httpx.MockTransport in Cloudflare's real shapes) and the
Cloudflare simulator core."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable

import httpx
import pytest

from functions.adapters.cloudflare import (
    CloudflareAuthError,
    CloudflareBadRequest,
    CloudflareClient,
    CloudflareRateLimited,
    CloudflareUnavailable,
    RequestBudget,
    TempCredentials,
)
from tether_local.cloudflare_sim import CloudflareSim

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


# --- simulator ------------------------------------------------------------------------------

SIM_TOKEN = "sim-token"


def sim_and_client(**sim_kw: object) -> tuple[CloudflareSim, CloudflareClient, FakeClock]:
    clock = FakeClock()
    sim = CloudflareSim(
        account_id=ACCOUNT,
        api_tokens=[SIM_TOKEN],
        parents={"parent-key": "object-read-write"},
        buckets=["tether-ckpt"],
        clock=clock,
        **sim_kw,  # type: ignore[arg-type]
    )
    client = CloudflareClient(
        ACCOUNT,
        SIM_TOKEN,
        base_url="http://cloudflare.local/client/v4",
        client=httpx.Client(transport=sim.transport()),
        sleep=clock.sleep,
        monotonic=clock,
        wall_clock=clock,
        min_ttl_s=60,
        deadline_s=5,
    )
    return sim, client, clock


def post(sim: CloudflareSim, body: object, token: str | None = SIM_TOKEN, account: str = ACCOUNT):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = httpx.Request(
        "POST",
        f"http://cloudflare.local/client/v4/accounts/{account}/r2/temp-access-credentials",
        headers=headers,
        content=json.dumps(body).encode(),
    )
    return sim.handle(request)


VALID = {
    "bucket": "tether-ckpt",
    "parentAccessKeyId": "parent-key",
    "permission": "object-read-write",
    "ttlSeconds": 600,
    "prefixes": ["jobs/j1/"],
}


def test_sim_mints_scoped_keys_the_adapter_can_use() -> None:
    sim, client, clock = sim_and_client()
    creds = client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/j1/", 600)
    assert len(creds.access_key_id) == 32
    assert sim.secret_for(creds.access_key_id) == creds.secret_access_key
    scope = sim.scope_for(creds.access_key_id)
    assert scope is not None
    assert (scope.bucket, scope.prefixes, scope.permission) == (
        "tether-ckpt",
        ("jobs/j1/",),
        "object-read-write",
    )
    assert scope.expires_at == creds.expires_at == clock.now + 600
    assert scope.allows("jobs/j1/checkpoints/00000100-g1/manifest.json")
    assert not scope.allows("jobs/j10/checkpoints/x")
    assert sim.secret_for("not-a-key") is None


def test_sim_keys_expire_on_the_clock() -> None:
    sim, client, clock = sim_and_client()
    creds = client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/j1/", 600)
    clock.now += 599
    assert sim.secret_for(creds.access_key_id) == creds.secret_access_key
    clock.now += 1
    assert sim.secret_for(creds.access_key_id) is None
    assert sim.scope_for(creds.access_key_id) is None
    clock.now -= 10  # an expired key stays gone
    assert sim.secret_for(creds.access_key_id) is None


def test_sim_revoking_the_parent_revokes_every_child() -> None:
    sim, client, _ = sim_and_client()
    a = client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/a/", 600)
    b = client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/b/", 600)
    sim.revoke_parent("parent-key")
    assert sim.secret_for(a.access_key_id) is None and sim.secret_for(b.access_key_id) is None


def test_sim_ttl_defaults_to_900() -> None:
    sim, _, clock = sim_and_client()
    body = {k: v for k, v in VALID.items() if k != "ttlSeconds"}
    reply = post(sim, body)
    assert reply.status_code == 200
    scope = sim.scope_for(reply.json()["result"]["accessKeyId"])
    assert scope is not None and scope.expires_at == clock.now + 900


@pytest.mark.parametrize(
    ("token", "account", "status", "code"),
    [(None, ACCOUNT, 400, 9106), ("wrong", ACCOUNT, 403, 10000), (SIM_TOKEN, "other", 403, 10000)],
)
def test_sim_auth_errors(token: str | None, account: str, status: int, code: int) -> None:
    sim, _, _ = sim_and_client()
    reply = post(sim, VALID, token=token, account=account)
    assert reply.status_code == status
    body = reply.json()
    assert body["success"] is False and body["errors"][0]["code"] == code


@pytest.mark.parametrize(
    ("change", "status", "needle"),
    [
        ({"ttlSeconds": 0}, 400, "ttlSeconds"),
        ({"ttlSeconds": 604_801}, 400, "ttlSeconds"),
        ({"ttlSeconds": "600"}, 400, "ttlSeconds"),
        ({"bucket": ""}, 400, "bucket"),
        ({"permission": "root"}, 400, "permission"),
        ({"prefixes": "jobs/j1/"}, 400, "prefixes"),
        ({"extra": 1}, 400, "extra"),
        ({"bucket": "nope"}, 404, "bucket does not exist"),
        ({"parentAccessKeyId": "ghost"}, 400, "parentAccessKeyId"),
        ({"permission": "admin-read-write"}, 400, "exceeds the parent"),
    ],
)
def test_sim_validation(change: dict[str, object], status: int, needle: str) -> None:
    sim, _, _ = sim_and_client()
    reply = post(sim, {**VALID, **change})
    assert reply.status_code == status
    messages = " ".join(e["message"] for e in reply.json()["errors"])
    assert needle in messages


def test_sim_rejects_non_json_unknown_routes_and_methods() -> None:
    sim, _, _ = sim_and_client()
    bad = httpx.Request(
        "POST",
        f"http://cf/client/v4/accounts/{ACCOUNT}/r2/temp-access-credentials",
        headers={"Authorization": f"Bearer {SIM_TOKEN}"},
        content=b"{not json",
    )
    assert sim.handle(bad).status_code == 400
    assert sim.handle(httpx.Request("GET", "http://cf/client/v4/zones")).status_code == 404
    get = httpx.Request("GET", f"http://cf/client/v4/accounts/{ACCOUNT}/r2/temp-access-credentials")
    assert sim.handle(get).status_code == 405


def test_sim_rate_limit_blocks_for_five_minutes() -> None:
    sim, _, clock = sim_and_client(rate_limit=3)
    assert [post(sim, VALID).status_code for _ in range(3)] == [200, 200, 200]
    limited = post(sim, VALID)
    assert limited.status_code == 429
    assert limited.headers["Retry-After"] == "300"
    assert limited.json()["errors"][0]["code"] == 971
    clock.now += 299
    still = post(sim, VALID)
    assert still.status_code == 429 and still.headers["Retry-After"] == "1"
    clock.now += 1
    assert post(sim, VALID).status_code == 200


def test_sim_rate_window_slides() -> None:
    sim, _, clock = sim_and_client(rate_limit=2)
    post(sim, VALID)
    clock.now += 200
    post(sim, VALID)
    clock.now += 100  # the first request left the 5-minute window
    assert post(sim, VALID).status_code == 200


def test_adapter_against_sim_rate_limit() -> None:
    _, client, _ = sim_and_client(rate_limit=1)
    client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/j1/", 600)
    with pytest.raises(CloudflareRateLimited) as info:
        client.mint_temp_credentials("tether-ckpt", "parent-key", "jobs/j1/", 600)
    assert info.value.retry_after_s == 300


def test_sim_is_thread_safe() -> None:
    sim, _, _ = sim_and_client(rate_limit=10_000)
    keys: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            reply = post(sim, VALID)
            assert reply.status_code == 200
            with lock:
                keys.append(reply.json()["result"]["accessKeyId"])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 400
    assert all(sim.secret_for(k) for k in keys)
    assert sim.requests_seen == 400
