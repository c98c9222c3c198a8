"""The Cloudflare simulator of the local stack (`tether_local/r2/cloudflare_sim.py`): scoped,
expiring keys, Cloudflare's errors and rate limit, and the real adapter against it."""

from __future__ import annotations

import base64
import json
import threading

import httpx
import pytest

from functions.adapters.cloudflare import (
    CloudflareClient,
    CloudflareRateLimited,
)
from tests.unit.adapters.test_cloudflare import ACCOUNT, FakeClock
from tether_local.r2.cloudflare_sim import CloudflareSim

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


def test_session_tokens_are_shaped_and_sized_as_r2s() -> None:
    # R2's session token is base64("jwt/" + JWT), about 550-700 characters: whatever carries
    # one (a heartbeat reply, a presigned URL; never Vast's 256-character env values) meets it
    # at its real size here.
    sim, _, _ = sim_and_client()
    tokens = []
    for prefix in ("jobs/tiny-cpu-0000abcd/", "jobs/tiny-cpu-0000abcd/g12/"):
        body = {**VALID, "prefixes": [prefix]}
        reply = post(sim, body).json()["result"]
        token = reply["sessionToken"]
        tokens.append(token)
        assert 550 <= len(token) <= 700, len(token)
        raw = base64.b64decode(token, validate=True)
        assert raw.startswith(b"jwt/")
        header, payload, signature = raw[4:].decode().split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        assert claims["prefixes"] == [prefix] and claims["accessKeyId"] == reply["accessKeyId"]
        assert json.loads(base64.urlsafe_b64decode(header + "==="))["typ"] == "JWT"
        assert len(signature) == 43  # HS256, base64url without padding
        live = sim.live_key(reply["accessKeyId"])
        assert live is not None and live.session_token == token  # what the R2 front checks
    assert len(set(tokens)) == 2
